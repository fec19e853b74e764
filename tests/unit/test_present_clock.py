"""A node's ``last_heartbeat`` is the injected clock's now less the heartbeat's age, in
the reply Structs (``node.describe``) and in ``node.list``'s cached JSON alike."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from herdbook.api.present import node_detail, node_json, node_summary
from herdbook.history.times import iso
from tests.fakes import FakeClock
from tests.unit.test_node_list_cache import T0, list_all, routes, view


def test_last_heartbeat_is_the_clocks_now_less_the_age() -> None:
    clock = FakeClock(T0, seconds=60.0)
    want = iso(T0 + timedelta(seconds=60.0 - 2.5))
    node = view("a")
    assert node_summary(node, 2.5, 30.0, clock=clock).last_heartbeat == want
    assert node_detail(node, 2.5, 30.0, clock=clock).last_heartbeat == want
    assert node_json(node, 2.5, 30.0, clock=clock)["last_heartbeat"] == want
    assert node_summary(node, None, 30.0, clock=clock).last_heartbeat is None


async def test_the_node_routes_read_the_runners_clock() -> None:
    api, _, beats = routes(view("a"))
    beats.ages["a"] = 4.0
    want = iso(T0 - timedelta(seconds=4.0))
    assert [n["last_heartbeat"] for n in await list_all(api, 10)] == [want]
    assert [n["last_heartbeat"] for n in await list_all(api, 10, wide=True)] == [want]
    assert api.summary(view("a")).last_heartbeat == want
    assert api.detail(view("a")).last_heartbeat == want
    assert msgspec.to_builtins(api.summary(view("a")))["heartbeat_age"] == 4.0
