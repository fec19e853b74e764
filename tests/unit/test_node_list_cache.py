"""`node.list` from cached JSON (issue 17): each node's bytes are those msgspec writes
for its ``NodeSummary``/``NodeDetail``, built once per view version with only the live
fields written per request; pages start by bisecting the sorted ids at the token."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from herdbook.api.messages import NodeDetail, NodeSummary
from herdbook.api.nodes import NodeRoutes
from herdbook.api.present import NodeJsonCache, node_detail, node_summary
from herdbook.config import Config
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import DecideRunner
from tests.fakes import FakeClock, FakeProjector

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
ODD = {"zone": "a", "q": 'say "hi"\x1b[31m', "u": "漢\u2028", "last_heartbeat": "x"}


def view(node_id: str, **changes: Any) -> NodeView:
    info = NodeInfo(hostname="h", cpus=8, labels=ODD, gpus=(GpuInfo(index=0, uuid="g",
                                                                     name="H100"),))
    return NodeView(**{"id": node_id, "type": NodeType.COMPUTE, "approval": Approval.APPROVED,
                       "lifecycle": Lifecycle.READY, "info": info, "registered_at": T0,
                       "fingerprint": "f" * 20, "boot_checks": {"a": "ok"}, "version": 3,
                       **changes})


class Beats:
    def __init__(self) -> None:
        self.ages: dict[str, float] = {}
        self.beats: dict[str, Any] = {}

    def heartbeat_age(self, node_id: str) -> float | None:
        return self.ages.get(node_id)

    def timeouts(self, node: NodeView) -> Any:
        return type("T", (), {"heartbeat_timeout": 30.0})()


def routes(*nodes: NodeView) -> tuple[NodeRoutes, FakeProjector, Beats]:
    projector = FakeProjector()
    projector.folded_seq = 1  # type: ignore[attr-defined]
    for node in nodes:
        projector.nodes.put(node.id, node)
    beats = Beats()
    runner = DecideRunner(None, projector, FakeClock(T0))  # type: ignore[arg-type]
    return NodeRoutes(None, None, projector, beats, runner, Config()), projector, beats  # type: ignore[arg-type]


def without_time(data: bytes) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.json.decode(data)
    out.pop("last_heartbeat")
    return out


def test_cached_bytes_are_the_replys_bytes_narrow_and_wide() -> None:
    cache = NodeJsonCache()
    encode = msgspec.json.encode
    for node in (view("a"), view("b", health=Health.UNHEALTHY, intent=Intent.CORDONED,
                                 claimed_by="ana", drift=True, approval_at=T0)):
        for age in (None, 0.0, 2.5, 31.0):
            for wide, build in ((False, node_summary), (True, node_detail)):
                got = cache.item(node, age, lambda v: 30.0, 2, 1e9, wide=wide)
                want = encode(build(node, age, 30.0, allocations=2,
                                   clock=FakeClock(datetime.fromtimestamp(1e9, UTC))))
                if age is None:
                    assert got == want
                else:
                    assert without_time(got) == without_time(want)
                    beat = msgspec.json.decode(got)["last_heartbeat"]
                    assert beat == datetime.fromtimestamp(1e9 - age, UTC).isoformat(
                        ).replace("+00:00", "Z")
                msgspec.json.decode(got, type=NodeDetail if wide else NodeSummary)


def test_an_entry_is_built_once_per_view_and_again_when_the_view_changes() -> None:
    cache = NodeJsonCache()
    first = view("a")
    cache.item(first, 1.0, lambda v: 30.0, 0, 1e9, wide=True)
    entry = cache._entries["a"]
    again = cache.item(first, 5.0, lambda v: 30.0, 1, 1e9 + 4, wide=True)
    assert cache._entries["a"] is entry                 # heartbeat moved: same entry
    assert msgspec.json.decode(again)["heartbeat_age"] == 5.0
    changed = view("a", intent=Intent.CORDONED, version=9)
    body = msgspec.json.decode(cache.item(changed, 5.0, lambda v: 30.0, 1, 1e9, wide=True))
    assert cache._entries["a"] is not entry and body["intent"] == "CORDONED"


async def list_all(api: NodeRoutes, limit: int, **query: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        raw = await api.node_list(msgspec.json.encode({"limit": limit, "next_token": token,
                                                       **query}))
        page = msgspec.json.decode(bytes(raw))
        items += page["items"]
        token = page["next_token"]
        if token is None:
            return items


async def test_pages_follow_the_sorted_ids_and_see_membership_changes() -> None:
    ids = [f"n{i:03d}" for i in (5, 1, 9, 3, 7, 2, 8)]
    api, projector, beats = routes(*(view(i) for i in ids))
    beats.ages["n003"] = 4.0
    listed = await list_all(api, 3)
    assert [n["id"] for n in listed] == sorted(ids)
    assert [n["heartbeat_age"] for n in listed if n["id"] == "n003"] == [4.0]
    sorted_once = api._sorted_ids()
    assert api._sorted_ids() is sorted_once             # nothing folded: no sort again
    projector.nodes.put("n000", view("n000"))
    projector.nodes.put("n005", None)
    projector.folded_seq = 2  # type: ignore[attr-defined]
    assert [n["id"] for n in await list_all(api, 2)] == sorted({*ids, "n000"} - {"n005"})
    # a token naming a node gone since (the old page's last id) still finds its place
    raw = await api.node_list(msgspec.json.encode({"next_token": "n004"}))
    assert [n["id"] for n in msgspec.json.decode(bytes(raw))["items"]][0] == "n007"


async def test_filters_and_wide_as_before() -> None:
    api, _, _ = routes(view("a"), view("b", approval=Approval.PENDING),
                       view("c", health=Health.UNHEALTHY))
    pending = await list_all(api, 10, filter_approval=["pending"])
    assert [n["id"] for n in pending] == ["b"] and "hostname" not in pending[0]
    wide = await list_all(api, 10, wide=True, filter_state=["unhealthy"])
    assert [n["id"] for n in wide] == ["c"] and wide[0]["hostname"] == "h"
