"""Repair episodes against a real nats-server and control plane: a node goes through
fault -> cordon -> drain -> reboot -> back in service, half of it in the log before the
control plane starts (the repair fold's seed) and half after (its live feed); the real
`herd fleet repairs` lists one episode with each step's time and actor, `herd status`
and GET /v1/repairs carry its percentiles, /metrics its histograms."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from msgspec.structs import replace

from herdbook.api.lookup import ApiError
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.health_report import GpuVerdict, NodeHealthChanged
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeCordoned,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
    NodeUndrained,
)
from herdbook.events.states import Health
from herdbook.events.store import EventStore
from tests.conftest import free_port, herd, poll
from tests.integration.test_metrics import http_get, sample

T0 = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def before_start(node: str) -> list[NodeEvent]:
    info = NodeInfo(gpus=tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="H100")
                               for i in range(8)), labels={"pool": "h100"})
    return [
        NodeRegistered(node_id=node, boot_id="b1", info=info, at=at(0)),
        NodeBootChecked(node_id=node, boot_id="b1", passed=True, at=at(1)),
        NodeApproved(node_id=node, actor="alice", at=at(2)),
        NodeHealthChanged(node_id=node, health=Health.UNHEALTHY, previous=Health.HEALTHY,
                          level="fatal", reason="xid-fatal: XID 79 on GPU 3",
                          actor="classifier", at=at(100),
                          gpus={3: GpuVerdict(level="fatal", rule="xid-fatal", kind="xid",
                                              xid=79)}),
        NodeCordoned(node_id=node, actor="alice", reason="GPU 3 fell off the bus", at=at(110)),
        NodeDrainStarted(node_id=node, actor="alice", at=at(120)),
        NodeDrained(node_id=node, actor="agent", at=at(300)),
    ]


def after_start(node: str) -> list[NodeEvent]:
    return [
        NodeBootStarted(node_id=node, trigger="reboot", actor="alice", at=at(400)),
        NodeBootStarted(node_id=node, trigger="agent_started", boot_id="b2", actor="agent",
                        at=at(700)),
        NodeBootChecked(node_id=node, boot_id="b2", passed=True, at=at(710)),
        NodeUncordoned(node_id=node, actor="bob", reason="GPU reseated", at=at(850)),
        NodeUndrained(node_id=node, actor="bob", at=at(900)),
    ]


async def seeded(route: Any, timeout: float = 30.0) -> None:
    """Until the repair fold has read the log (the route answers unavailable before)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await route(b"{}")
            return
        except ApiError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


async def test_a_repair_is_listed_with_its_steps_percentiles_and_metrics(
        nc: Any, nats_server: Any, tmp_path: Path) -> None:
    store = EventStore(nc)
    for event in before_start("gpu-7"):
        await store.append(event)
    metrics_port, http_port = free_port(), free_port()
    # heartbeats never come from gpu-7: a long timeout keeps the sweeper from writing
    # node.degraded with today's times into this test's history
    config = parse_config(
        f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp-r\n"
        f"metrics: {{port: {metrics_port}}}\nhttp: {{port: {http_port}}}\n"
        "lifecycle: {heartbeat_timeout: 1h}\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        await seeded(plane.api.routes["fleet.repairs"])

        async def cli(*args: str) -> Any:
            return await asyncio.to_thread(herd, *args, server=nats_server.url)

        # given the seed: one open episode, quarantined and drained
        first = json.loads((await cli("fleet", "repairs", "-o", "json")).stdout)
        [episode] = first["items"]
        assert (episode["outcome"], episode["back_at"]) == ("open", None)
        assert episode["drained_at"] == at(300).isoformat().replace("+00:00", "Z")
        assert first["summary"]["open"] == 1

        # when the rest happens live
        for event in after_start("gpu-7"):
            await store.append(event)
        await poll(lambda: plane.projector.nodes["gpu-7"].schedulable, what="back in service")

        shown = json.loads((await cli("fleet", "repairs", "--since", "2h", "-o",
                                      "json")).stdout)
        [episode] = shown["items"]

        def iso(seconds: float) -> str:
            return at(seconds).isoformat().replace("+00:00", "Z")

        assert episode["id"].startswith("gpu-7:")
        assert (episode["pool"], episode["kind"], episode["xid"], episode["gpus"]) == (
            "h100", "xid", 79, 8)
        assert (episode["detected_at"], episode["detected_by"]) == (iso(100), "classifier")
        assert (episode["quarantined_at"], episode["quarantine"]) == (iso(100), "unhealthy")
        assert (episode["drained_at"], episode["drained_by"]) == (iso(300), "agent")
        assert (episode["remediated_at"], episode["remediation"], episode["remediated_by"]) \
            == (iso(400), "reboot", "alice")
        assert (episode["back_at"], episode["back_by"], episode["outcome"]) == (
            iso(900), "bob", "back")
        assert episode["durations"] == {"time_to_quarantine": 0.0, "time_to_drain": 200.0,
                                        "time_in_repair": 800.0, "mttr": 800.0}
        assert [(s["step"], s["at"], s.get("actor")) for s in episode["steps"]][:4] == [
            ("detected", iso(100), "classifier"), ("quarantined", iso(100), "classifier"),
            ("cordoned", iso(110), "alice"), ("drain_started", iso(120), "alice")]
        assert shown["summary"]["fleet"]["mttr"]["p50"] == 800.0
        assert shown["summary"]["pools"]["h100"]["mttr"]["count"] == 1
        assert shown["summary"]["kinds"]["xid"]["time_to_drain"]["p50"] == 200.0
        # 8 GPUs owned since T0+2; out of service 100..900 of that
        avail = shown["availability"]
        assert avail["gpu_hours_owned"] > 8 * 3000 / 3600
        assert 0 < avail["availability"] < 1

        table = await cli("fleet", "repairs", "--since", "2h")
        assert table.returncode == 0, table.stderr
        assert episode["id"] in table.stdout and "reboot" in table.stdout
        assert "1 back in service, 0 open" in table.stdout
        assert "MTTR:" in table.stdout and "p50 800s" in table.stdout
        steps = await cli("fleet", "repairs", "--steps", "-o", "csv")
        assert f"{episode['id']},{iso(400)},boot_started,alice,reboot" in steps.stdout
        later = json.loads((await cli("fleet", "repairs", "--since", "1m", "-o",
                                      "json")).stdout)
        assert later["items"] == []      # detected and back before the window
        bad = await cli("fleet", "repairs", "--since", "last tuesday")
        assert bad.returncode == 2 and bad.stderr.startswith("Error: --since: invalid time")
        assert len(bad.stderr.strip().splitlines()) == 1

        status = json.loads((await cli("status", "-o", "json")).stdout)["repairs"]
        assert status["mttr"] == {"p50_s": 800.0, "p90_s": 800.0, "count": 1}
        # the four durations per pool (with its availability) and per fault kind
        for by, key in (("by_pool", "h100"), ("by_kind", "xid")):
            assert {name: row["p50_s"] for name, row in status[by][key].items()
                    if name != "availability"} == episode["durations"], status[by]
            assert status[by][key]["mttr"] == {"p50_s": 800.0, "p90_s": 800.0, "count": 1}
        assert status["by_pool"]["h100"]["availability"] == status["availability"]
        assert "availability" not in status["by_kind"]["xid"]
        assert 0 < status["availability"] < 1

        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{http_port}/v1/repairs",
                                   params={"since": "2h", "pool": "h100"}) as response:
                assert response.status == 200
                body = await response.json()
        assert [i["id"] for i in body["items"]] == [episode["id"]]

        _, _, text = await http_get(metrics_port, "/metrics")
        labels = 'pool="h100",kind="xid"'
        assert sample(text, f"herd_repair_mttr_seconds_count{{{labels}}}") == 1
        assert sample(text, f"herd_repair_mttr_seconds_sum{{{labels}}}") == 800.0
        assert sample(text, f'herd_repair_mttr_seconds_bucket{{{labels},le="900.0"}}') == 1
        assert sample(text, f'herd_repair_mttr_seconds_bucket{{{labels},le="300.0"}}') == 0
        assert sample(text, f"herd_repair_time_to_drain_seconds_sum{{{labels}}}") == 200.0
        for name in ("time_to_quarantine", "time_in_repair"):
            assert sample(text, f"herd_repair_{name}_seconds_count{{{labels}}}") == 1
        assert "# TYPE herd_repair_open_episodes gauge" in text
        ratio = sample(text, "herd_fleet_availability_ratio")
        assert ratio is not None and 0 < ratio < 1
        assert sample(text, 'herd_pool_availability_ratio{pool="h100"}') == ratio
    finally:
        await plane.stop()


class Row:
    """A node row as the projector's table holds it: the listener reads its version."""

    def __init__(self, version: int) -> None:
        self.version = version


async def test_what_the_projector_folds_during_the_seed_read_is_held_then_folded(
        nc: Any) -> None:
    from herdbook.events.instance import InstanceProvisioning
    from herdbook.history.repairs_live import LiveRepairs
    from herdbook.projector.tables import Table

    store = EventStore(nc)
    seq = 0
    for event in before_start("gpu-8"):
        seq = await store.append(event)
    nodes: Table[Any, Any] = Table("nodes")
    instances: Table[Any, Any] = Table("instances")
    live = LiveRepairs(nc.jetstream(), nodes, instances, lambda: seq)
    await live.start()
    try:
        assert not live.ready
        # the projector folds the rest (and a replacement's provisioning) before the seed
        # task has read anything: held back, folded after the seed, in order
        rest = after_start("gpu-8")
        for i, event in enumerate(rest, start=1):
            nodes.put("gpu-8", Row(seq + i), event)
        instances.put("i9", None, InstanceProvisioning(
            instance_id="i9", pool="h100", provider="fake", node_id="gpu-9",
            replaces="gpu-x"))
        assert live._task is not None
        await asyncio.wait_for(live._task, 20)
        assert live.ready and live.state.seq == seq + len(rest)
        [episode] = live.state.closed
        assert (episode.drained_at, episode.back_at) == (at(300), at(900))
        assert live.state.successors == {"gpu-9": "gpu-x"}
        # live from now on: a new fault opens an episode at once
        fault = NodeCordoned(node_id="gpu-8", actor="x", at=at(1000))
        nodes.put("gpu-8", Row(seq + 99), fault)
        again = replace(before_start("gpu-8")[3], event_id="e2", at=at(1100))
        nodes.put("gpu-8", Row(seq + 100), again)
        assert live.state.open["gpu-8"].quarantine == "already cordoned"
    finally:
        await live.stop()
