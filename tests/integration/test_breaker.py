"""The fleet-wide circuit breaker against a real nats-server (issue 19): a chaos run where
30 % of a 40-node fleet reports a fatal XID at once takes at most the limit (10 %: 4)
UNHEALTHY, holds the rest as ``node.action_held``, opens ``herd_breaker_open``, and
``herd breaker reset`` closes it; the next report is decided again."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from herdbook.control.plane import ControlPlane
from herdbook.events.breaker_events import BreakerReset, BreakerTripped, NodeActionHeld
from herdbook.events.codec import encode
from herdbook.events.health_report import GpuEvent, HealthReport
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.states import Health, Lifecycle
from herdbook.events.subjects import HEALTH_STREAM
from tests.conftest import free_port, herd
from tests.integration.conftest import running_plane
from tests.integration.test_agent_executor import eventually

pytestmark = pytest.mark.timeout(120)
NODES, FAILING = 40, 12
REPORTS = itertools.count(0, 100)
INFO = NodeInfo(gpus=tuple(GpuInfo(index=i, uuid=f"u{i}", name="H100") for i in range(8)))


@pytest.fixture
async def plane(nats_server, tmp_path: Path) -> AsyncIterator[ControlPlane]:  # type: ignore[no-untyped-def]
    async with running_plane(
            f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp\n"
            f"metrics: {{port: {free_port()}}}\n"
            "lifecycle: {heartbeat_timeout: 10m, grace_period: {standard: 10m}}\n"
            "breaker: {max_share: 0.10, window: 1h, min_nodes: 2}\n") as control:
        yield control


async def api(plane: ControlPlane, route: str, body: dict[str, Any]) -> Any:
    assert plane.nc is not None
    reply = json.loads((await plane.nc.request(f"herd.api.v1.{route}",
                                               json.dumps(body).encode(), timeout=10)).data)
    assert reply["ok"], reply
    return reply["result"]


async def metric(plane: ControlPlane, line: str) -> float | None:
    assert plane.metrics_server is not None
    async with aiohttp.ClientSession() as client, \
            client.get(plane.metrics_server.url) as response:
        text = await response.text()
    for row in text.splitlines():
        if row.startswith(line + " "):
            return float(row.split()[-1])
    return None


async def fatal(plane: ControlPlane, *node_ids: str) -> None:
    assert plane.nc is not None
    js = plane.nc.jetstream()
    await asyncio.gather(*(js.publish(f"herd.health.{n}", encode(HealthReport(
        report_id=f"r-{n}-{i}", node_id=n, boot_id="b",
        events=(GpuEvent(kind="xid", xid=79),))), stream=HEALTH_STREAM)
        for i, n in enumerate(node_ids, start=next(REPORTS))))


async def test_a_fatal_xid_on_30_percent_of_the_fleet_trips_the_breaker(
        plane: ControlPlane, nats_server: Any) -> None:
    store, projector = plane.store, plane.projector
    assert store is not None and projector is not None
    ids = [f"gpu-{i:02d}" for i in range(NODES)]
    for node_id in ids:
        await store.append(NodeRegistered(node_id=node_id, boot_id="b", info=INFO))
        await store.append(NodeApproved(node_id=node_id))
        await store.append(NodeBootChecked(node_id=node_id, boot_id="b", passed=True))

    async def ready() -> bool:
        return sum(1 for n in ids if n in projector.nodes
                   and projector.nodes[n].lifecycle is Lifecycle.READY) == NODES
    await eventually(ready, what="40 nodes READY")

    await fatal(plane, *ids[:FAILING])

    async def settled() -> bool:
        views = [projector.nodes[n] for n in ids[:FAILING]]
        return sum(1 for v in views if v.health is Health.UNHEALTHY or v.held) == FAILING
    await eventually(settled, what="every fatal report decided")
    unhealthy = [n for n in ids if projector.nodes[n].health is Health.UNHEALTHY]
    held = [n for n in ids if projector.nodes[n].held == "unhealthy"]
    assert len(unhealthy) == 4 and len(held) == FAILING - 4
    assert all(projector.nodes[n].lifecycle is Lifecycle.READY for n in held)
    last = (await store.load("node", held[0]))[-1][1]
    assert isinstance(last, NodeActionHeld)
    assert last.reason == ("breaker open (fleet): 4 of 40 nodes (10%) taken out automatically "
                           "in 1h, limit 4 (10%)")
    assert last.would.startswith("UNHEALTHY and DOWN: ")

    async def tripped() -> Any:
        status = await api(plane, "breaker.status", {})
        return status if status["open"] else None
    status = await eventually(tripped, what="breaker.tripped")
    (fleet,) = status["scopes"]
    assert (fleet["scope"], fleet["size"], fleet["taken_out"], fleet["limit"]) == (
        "fleet", 40, 4, 4)
    assert len(status["held"]) == FAILING - 4
    trips = [e for _, e in await store.load("breaker", "fleet")]
    assert [type(e) for e in trips] == [BreakerTripped]
    assert await metric(plane, 'herd_breaker_open{scope="fleet"}') == 1.0
    assert await metric(plane, "herd_breaker_held_total") == FAILING - 4

    # the health score: 4 of 40 nodes' GPUs unhealthy (and DOWN), 36 schedulable
    overview = await api(plane, "status", {})
    assert overview["breaker_open"] is True
    score = overview["health_score"]
    assert (score["nodes"], score["gpus"], score["gpus_healthy"], score["schedulable"]) == (
        40, 320, 0.9, 0.9)
    assert score["score"] == 90 and score["faults"] == {"down": 4, "unhealthy": 4}
    assert await metric(plane, "herd_fleet_health_score") == 90.0

    # the operator's CLI: status, then reset with a reason
    url = nats_server.url
    shown = await asyncio.to_thread(herd, "breaker", "status", "-o", "json", server=url,
                                    check=True)
    assert json.loads(shown.stdout)["open"] is True
    out = await asyncio.to_thread(herd, "breaker", "reset", server=url)
    assert out.returncode == 2 and "--reason" in out.stderr
    done = await asyncio.to_thread(herd, "breaker", "reset", "--reason", "driver rolled back",
                                   server=url, check=True)
    assert "Reset: every scope" in done.stdout
    trips = [e for _, e in await store.load("breaker", "fleet")]
    assert isinstance(trips[-1], BreakerReset) and trips[-1].reason == "driver rolled back"
    status = await api(plane, "breaker.status", {})
    assert status["open"] is False and status["held"] == []
    assert await metric(plane, 'herd_breaker_open{scope="fleet"}') == 0.0

    # held actions are decided again on the next report, counted from the reset
    await fatal(plane, held[0])

    async def decided_again() -> bool:
        return projector.nodes[held[0]].health is Health.UNHEALTHY
    await eventually(decided_again, what="the next report decided after the reset")


async def test_an_open_breaker_stays_open_across_a_restart(nats_server: Any,
                                                          tmp_path: Path) -> None:
    config = (f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
              "node_id: cp\n")
    async with running_plane(config) as first:
        assert first.store is not None
        await first.store.append(BreakerTripped(scope="pool:a", taken_out=3, size=10, limit=2,
                                                reason="breaker open (pool:a)"))

        async def tripped() -> bool:
            return bool((await api(first, "breaker.status", {}))["open"])
        await eventually(tripped, what="the trip folded")
    async with running_plane(config) as second:
        status = await api(second, "breaker.status", {})
        assert status["open"] is True
        (pool,) = [s for s in status["scopes"] if s["scope"] == "pool:a"]
        assert pool["open"] and pool["reason"] == "breaker open (pool:a)"
        assert second.nc is not None
        for bad in ({"scope": "rack:7", "reason": "ok"}, {"scope": "fleet"}):
            reply = json.loads((await second.nc.request(
                "herd.api.v1.breaker.reset", json.dumps(bad).encode(), timeout=10)).data)
            assert not reply["ok"] and reply["code"] == "bad_request", reply
        await api(second, "breaker.reset", {"scope": "pool:a", "reason": "ok"})
        assert (await api(second, "breaker.status", {}))["open"] is False
