"""``/v1/fleet`` followed by journals (``FleetJson.follow``, issue 32 item 3): the projector's
tables and the telemetry intake name the ids they change, and a request visits only those
rows. For every history of folds, samples, allocations, membership changes and reloads,
the followed reply is byte for byte the reply of a fresh ``FleetJson`` that walks
everything; and a request after one fold builds one row without looking at the others."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from herdbook.events.alloc import AllocStatus
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.projector.tables import Table
from herdbook.reactors.seen_column import SeenColumn
from herdbook.reactors.telemetry_intake import Sample
from herdbook.web.fleet_rows import FleetJson
from tests.unit.test_fleet_json import fleet, sample

EVENT = object()   # a table tells its listeners only of a put that carries its event


class Plane:
    """The reply's inputs as the control plane keeps them: real projector tables, the
    telemetry table and the intake's journal of changed samples."""

    def __init__(self, n: int) -> None:
        self.nodes: Table[NodeView, Any] = Table("nodes")
        self.nodes.load(fleet(n))
        self.allocs: Table[AllocView, Any] = Table("allocs")
        self.samples: dict[str, Sample] = {}
        self.sampled: set[str] = set()
        self.seen = SeenColumn()
        self.seq = 1
        self.followed = FleetJson()
        self.followed.follow(self.nodes, self.allocs, self.sampled)

    def reply(self, cache: FleetJson) -> bytes:
        return cache.reply(self.nodes.rows, self.allocs.values, self.seq, self.seq, self.seen,
                           1000.0, self.samples)

    def fold(self, op: str, i: int) -> None:
        ids = sorted(self.nodes)
        node_id = ids[i % len(ids)] if ids else "n0000"
        if op == "fold" and ids:
            self.nodes.put(node_id, replace(self.nodes[node_id], last_event=f"e{self.seq}"),
                           EVENT)
        elif op == "add":
            self.nodes.put(f"m{self.seq:04d}", replace(fleet(1)["n0000"], id=f"m{self.seq:04d}"),
                           EVENT)
        elif op == "remove" and ids:
            self.nodes.put(node_id, None, EVENT)
        elif op == "reload":
            self.nodes.load(dict(self.nodes.rows))     # a view loaded anew: nobody told
        elif op in ("place", "finish", "drop"):
            alloc_id = f"{node_id}-a{i % 2}"    # an allocation stays on its node
            if op == "drop":
                self.allocs.put(alloc_id, None, EVENT)
            else:
                status = AllocStatus.RUNNING if op == "place" else AllocStatus.COMPLETE
                self.allocs.put(alloc_id, AllocView(id=alloc_id, job_id="j", node_id=node_id,
                                                    eval_id="e", index=0, command=["x"],
                                                    status=status), EVENT)
        elif op == "sample":
            self.samples[node_id] = sample(node_id, 40.0 + self.seq)
            self.sampled.add(node_id)
        elif op == "forget":
            self.samples.pop(node_id, None)
            self.sampled.add(node_id)
        self.seq += 1


OPS = st.sampled_from(["fold", "add", "remove", "reload", "place", "finish", "drop",
                       "sample", "forget", "request"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(OPS, st.integers(0, 50)), max_size=40), st.integers(0, 6))
def test_the_followed_reply_is_the_full_walks_for_every_history(
        history: list[tuple[str, int]], n: int) -> None:
    plane = Plane(n)
    for op, i in [*history, ("request", 0)]:
        if op == "request":
            assert plane.reply(plane.followed) == plane.reply(FleetJson())
        else:
            plane.fold(op, i)


class Counting(dict[str, NodeView]):
    """The nodes' rows, counting lookups (the full walk reads every row after a fold)."""

    reads = 0

    def __getitem__(self, key: str) -> NodeView:
        Counting.reads += 1
        return super().__getitem__(key)


def test_after_one_fold_a_request_looks_at_one_row_and_one_sample() -> None:
    plane = Plane(500)
    plane.nodes._rows = Counting(plane.nodes.rows)   # load copies into a plain dict
    plane.reply(plane.followed)                       # the first request walks everything
    assert plane.followed.built == 500
    plane.fold("fold", 7)
    plane.fold("sample", 9)
    Counting.reads = 0
    body = plane.reply(plane.followed)
    assert plane.followed.built == 501 and Counting.reads == 0
    assert body == plane.reply(FleetJson())
    unfollowed = FleetJson()
    plane.reply(unfollowed)
    plane.fold("fold", 8)
    Counting.reads = 0
    plane.reply(unfollowed)
    assert Counting.reads == 500                      # what following saves at every fold
