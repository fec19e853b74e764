"""``/v1/fleet``'s reply bytes (``web/fleet_rows.py``'s ``FleetJson``, issue 32 item 3): the same
JSON the rows encode to, with the work per request linear in the fleet. One event rebuilds
one row, not every row (the old reply re-encoded and re-sorted the whole fleet after any
fold); membership changes re-sort; a new telemetry sample or allocation count rebuilds
only that node's part. Pure: views and samples are built here."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from herdbook.events.alloc import AllocStatus
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.seen_column import SeenColumn
from herdbook.reactors.telemetry_intake import Sample
from herdbook.web.fleet_rows import FLEET_COLUMNS, FleetJson, gpu_numbers, static_row
from tests.unit.test_web_fleet import view


def fleet(n: int) -> dict[str, NodeView]:
    return {f"n{i:04d}": replace(view(), id=f"n{i:04d}") for i in range(n)}


def sample(node_id: str, temp: float) -> Sample:
    return Sample(GpuTelemetry(node_id=node_id, boot_id="b", gpus=(
        GpuReading(index=0, temperature_c=temp, gpu_util_pct=50.0),)), 0.0, True)


class Reads:
    """The reply's inputs as the server hands them over."""

    def __init__(self, nodes: dict[str, NodeView]) -> None:
        self.nodes = nodes
        self.allocs: list[AllocView] = []
        self.samples: dict[str, Sample] = {}
        self.seen = SeenColumn()
        self.now = 1000.0
        self.seq = 1
        self.cache = FleetJson()

    def reply(self) -> dict[str, Any]:
        body = self.cache.reply(self.nodes, lambda: self.allocs, self.seq, self.seq - 1,
                                self.seen, self.now, self.samples)
        decoded: dict[str, Any] = msgspec.json.decode(body)
        return decoded


def test_the_reply_is_the_rows_json_in_id_order_with_the_live_columns() -> None:
    nodes = fleet(3)
    reads = Reads(dict(reversed(nodes.items())))
    reads.seen.set("n0001", reads.now - 2.345)
    reads.samples["n0002"] = sample("n0002", 71.0)
    reads.allocs = [AllocView(id="a", job_id="j", node_id="n0000", eval_id="e", index=0,
                              command=["x"], status=AllocStatus.RUNNING)]
    reply = reads.reply()
    assert reply["version"] == 0 and reply["columns"] == list(FLEET_COLUMNS)
    counts = {"n0000": 1}
    expected = [msgspec.json.decode(msgspec.json.encode(
        [*static_row(nodes[k], counts), age, *gpu_numbers(reads.samples.get(k))]))
        for k, age in (("n0000", None), ("n0001", 2.3), ("n0002", None))]
    assert reply["rows"] == expected
    assert reply["rows"][2][-2:] == [71.0, 50.0]


def test_one_event_rebuilds_one_row_not_the_fleet() -> None:
    reads = Reads(fleet(500))
    reads.reply()
    assert reads.cache.built == 500
    reads.reply()                                    # nothing folded: nothing rebuilt
    assert reads.cache.built == 500
    reads.nodes["n0007"] = replace(reads.nodes["n0007"], last_event="node.uncordoned")
    reads.seq += 1
    rows = reads.reply()["rows"]
    assert reads.cache.built == 501                  # the old reply rebuilt all 500
    assert rows[7][FLEET_COLUMNS.index("last_event")] == "node.uncordoned"


def test_membership_changes_resort_and_drop_the_gone() -> None:
    reads = Reads(fleet(3))
    reads.reply()
    del reads.nodes["n0001"]
    reads.nodes["n0000a"] = replace(reads.nodes["n0000"], id="n0000a")
    reads.seq += 1
    assert [r[0] for r in reads.reply()["rows"]] == ["n0000", "n0000a", "n0002"]


def test_a_new_sample_or_allocation_count_changes_only_its_node() -> None:
    reads = Reads(fleet(3))
    reads.samples["n0001"] = sample("n0001", 40.0)
    assert reads.reply()["rows"][1][-2] == 40.0
    reads.samples["n0001"] = sample("n0001", 88.0)           # no event: still read
    assert reads.reply()["rows"][1][-2] == 88.0
    built = reads.cache.built
    reads.allocs = [AllocView(id="a", job_id="j", node_id="n0002", eval_id="e", index=0,
                              command=["x"], status=AllocStatus.RUNNING)]
    reads.seq += 1
    assert reads.reply()["rows"][2][FLEET_COLUMNS.index("allocs")] == 1
    assert reads.cache.built == built + 1


class Counted(dict[str, Any]):
    """A table that counts lookups by id (the reply must read it in its own order)."""

    lookups = 0

    def get(self, key: str, default: Any = None) -> Any:
        Counted.lookups += 1
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        Counted.lookups += 1
        return super().__getitem__(key)


def test_live_columns_are_read_in_the_tables_order_without_a_lookup_per_node() -> None:
    reads = Reads(fleet(4))
    seen = reads.seen                       # slots in an order of their own, one node missing
    for node_id, age in (("n0003", 1.04), ("n0000", 0.0), ("n0001", 7.25)):
        seen.set(node_id, reads.now - age)
    seen.times[seen.slots["n0001"]] = float("nan")   # a slot, no heartbeat yet: no age
    seen.slots = Counted(seen.slots)        # type: ignore[misc]
    samples = Counted(n0002=sample("n0002", 61.0))
    reads.samples = samples
    Counted.lookups = 0
    rows = reads.reply()["rows"]
    assert [r[FLEET_COLUMNS.index("last_heartbeat_age")] for r in rows] == [0.0, None, None, 1.0]
    assert [r[-2] for r in rows] == [None, None, 61.0, None]
    assert Counted.lookups == 4             # the slots' order, once (not per request)
    seen.set("n0001", reads.now - 0.5)      # in place: the same slot
    reads.now += 0.26
    Counted.lookups = 0
    rows = reads.reply()["rows"]
    assert Counted.lookups == 0             # was one per node and table (0.1 -> 1.1 µs at 100k)
    assert [r[FLEET_COLUMNS.index("last_heartbeat_age")] for r in rows] == [0.3, 0.8, None, 1.3]
    seen.set("n0002", reads.now - 3.0)      # a new slot: the order is rebuilt
    del samples["n0002"]
    samples["n0000"] = sample("n0000", 44.0)
    rows = reads.reply()["rows"]
    assert [r[FLEET_COLUMNS.index("last_heartbeat_age")] for r in rows] == [0.3, 0.8, 3.0, 1.3]
    assert [r[-2] for r in rows] == [44.0, None, None, None]


def test_a_changed_input_changes_only_its_segment() -> None:
    """Each cached segment (a row's GPU numbers, the next row's event-log part) is rebuilt
    when either input changes, and the reply matches the rows encoded from scratch."""
    reads = Reads(fleet(3))
    for k in reads.nodes:
        reads.samples[k] = sample(k, 50.0)
        reads.seen.set(k, reads.now - 1.0)
    reads.reply()
    reads.samples["n0000"] = sample("n0000", 77.0)       # row 0's tail, row 1's segment
    reads.nodes["n0001"] = replace(reads.nodes["n0001"], last_event="node.cordoned")
    reads.samples["n0002"] = sample("n0002", 33.0)       # the last row: the reply's end
    reads.seq += 1
    rows = reads.reply()["rows"]
    expected = [msgspec.json.decode(msgspec.json.encode(
        [*static_row(reads.nodes[k], {}), 1.0, *gpu_numbers(reads.samples[k])]))
        for k in sorted(reads.nodes)]
    assert rows == expected
    reads.seen.drop("n0001")                              # forgotten: no age
    assert [r[FLEET_COLUMNS.index("last_heartbeat_age")] for r in reads.reply()["rows"]] \
        == [1.0, None, 1.0]
