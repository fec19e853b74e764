"""``/v1/fleet``'s reply bytes (``web/fleet.py``'s ``FleetJson``, issue 32 item 3): the same
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
from herdbook.reactors.telemetry_intake import Sample
from herdbook.web.fleet import FLEET_COLUMNS, FleetJson, gpu_numbers, static_row
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
        self.ages: dict[str, float] = {}
        self.seq = 1
        self.cache = FleetJson()

    def reply(self) -> dict[str, Any]:
        body = self.cache.reply(self.nodes, lambda: self.allocs, self.seq, self.seq - 1,
                                self.ages.get, self.samples.get)
        decoded: dict[str, Any] = msgspec.json.decode(body)
        return decoded


def test_the_reply_is_the_rows_json_in_id_order_with_the_live_columns() -> None:
    nodes = fleet(3)
    reads = Reads(dict(reversed(nodes.items())))
    reads.ages["n0001"] = 2.345
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
