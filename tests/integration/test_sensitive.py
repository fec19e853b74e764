"""Sensitive nodes on a real nats-server with a real control plane and real agents
(in-process): concurrent claims, release → wipe → back in the pool, a wipe that times
out or fails → QUARANTINED (and a forced wipe brings it back), conformance drift."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.node import NodeConformanceChanged, NodeDrainStarted, NodeWipeFailed
from herdbook.events.states import NodeClass
from herdbook.events.store import EventStore
from tests.conftest import poll

CONFIG = """
nats: {{url: '{url}'}}
data_dir: '{data}'
node_id: cp-sensitive
approval: {{auto_approve: true}}
lifecycle:
  heartbeat_timeout: 2s
sensitive:
  wipe_timeout: 2s
  conformance_interval: 300ms
metrics: {{port: {metrics_port}}}
"""


class World:
    def __init__(self, url: str, tmp: Path, nc: Any) -> None:
        self.url = url
        self.tmp = tmp
        self.nc = nc
        from tests.conftest import free_port
        self.metrics_port = free_port()
        self.plane = bootstrap(parse_config(CONFIG.format(
            url=url, data=tmp / "cp", metrics_port=self.metrics_port)), clock=SYSTEM_CLOCK)
        self.agents: list[tuple[Agent, asyncio.Task[None]]] = []

    async def agent(self, node_id: str, wipe_steps: str | None = None) -> Agent:
        wipe_config = None
        if wipe_steps is not None:
            wipe_config = str(self.tmp / f"{node_id}-wipe.yaml")
            Path(wipe_config).write_text(wipe_steps)
        agent = Agent(AgentOptions(
            server=self.url, node_id=node_id, state_dir=str(self.tmp / node_id),
            labels={"pool": "secure"}, node_class=NodeClass.SENSITIVE, fake_gpus=1,
            heartbeat_interval=0.2, wipe_config=wipe_config))
        self.agents.append((agent, asyncio.create_task(agent.run())))
        await self.until(lambda: self.node(node_id).get("state") == "READY"
                         and self.node(node_id).get("approval") == "APPROVED", 20)
        return agent

    def node(self, node_id: str) -> dict[str, Any]:
        assert self.plane.projector is not None
        view = self.plane.projector.nodes.get(node_id)
        if view is None:
            return {}
        return {"state": view.state, "approval": view.approval.value, "view": view}

    def view(self, node_id: str) -> Any:
        return self.node(node_id)["view"]

    async def call(self, route: str, **body: Any) -> dict[str, Any]:
        msg = await self.nc.request(f"herd.api.v1.{route}", json.dumps(body).encode(),
                                    timeout=10)
        return dict(json.loads(msg.data))

    async def until(self, predicate: Callable[[], Any], timeout: float = 15.0) -> Any:
        return await poll(predicate, timeout)

    async def metric(self, name: str) -> float:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.metrics_port)
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        await writer.drain()
        body = (await reader.read()).decode()
        writer.close()
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    async def events(self, node_id: str) -> list[Any]:
        return [e for _, e in await EventStore(self.nc).load("node", node_id)]


@pytest.fixture
async def world(nats_server: Any, nc: Any, tmp_path: Path) -> AsyncIterator[World]:
    w = World(nats_server.url, tmp_path, nc)
    await w.plane.start()
    try:
        yield w
    finally:
        for agent, task in w.agents:
            await agent.stop()
            await asyncio.gather(task, return_exceptions=True)
        await w.plane.stop()


async def test_two_concurrent_claims_have_one_winner(world: World) -> None:
    await world.agent("s1")
    first, second = await asyncio.gather(
        world.call("node.claim", id="s1", user="ana", tenant="bio"),
        world.call("node.claim", id="s1", user="bob", tenant="chem"))
    results = sorted([first, second], key=lambda r: not r["ok"])
    assert results[0]["ok"] is True and results[1]["ok"] is False
    winner = world.view("s1").claimed_by
    assert winner in ("ana", "bob")
    assert results[1]["error"].startswith(f"node s1 is already claimed by {winner}")
    claims = [e for e in await world.events("s1") if e.event_name == "claimed"]
    assert len(claims) == 1


async def test_release_wipes_the_node_and_returns_it_to_the_pool(world: World) -> None:
    await world.agent("s1")
    assert (await world.call("node.claim", id="s1", user="ana"))["ok"]
    assert (await world.call("node.release", id="s1", reason="done"))["ok"]
    view = await world.until(lambda: world.view("s1").wipe_status == "wiped"
                             and world.view("s1"))
    assert view.lifecycle.value == "READY" and view.schedulable and view.claimed_by is None
    assert set(view.wipe_steps) == {"gpu_memory_clear", "nvme_secure_erase", "ram_scrub",
                                    "reboot_clean_image"}
    names = [e.event_name for e in await world.events("s1")]
    assert names[-7:] == ["claimed", "released", "wipe_started", "wipe_step", "wipe_step",
                          "wipe_step", "wipe_step"] or names[-1] == "wiped"


async def test_a_wipe_that_times_out_quarantines_and_a_forced_wipe_recovers(
        world: World) -> None:
    marker = world.tmp / "erase-ok"
    steps = f"""steps:
  - name: nvme_secure_erase
    command: ["sh", "-c", "test -f {marker} || sleep 30"]
    timeout: 60
"""
    await world.agent("s1", steps)
    assert await world.metric("herd_sensitive_wipe_failure_total") == 0
    assert (await world.call("node.claim", id="s1", user="ana"))["ok"]
    assert (await world.call("node.release", id="s1"))["ok"]
    view = await world.until(lambda: world.view("s1").lifecycle.value == "QUARANTINED"
                             and world.view("s1"), timeout=15)
    assert not view.schedulable and "wipe_timeout" in view.lifecycle_reason
    failed = [e for e in await world.events("s1") if isinstance(e, NodeWipeFailed)]
    assert len(failed) == 1 and failed[0].actor == "sensitive"
    assert await world.metric("herd_sensitive_wipe_failure_total") == 1
    # it stays QUARANTINED by itself (longer than the timeout again)
    await asyncio.sleep(2.5)
    assert world.view("s1").lifecycle.value == "QUARANTINED"
    # an operator fixes it and forces the wipe again
    refused = await world.call("node.wipe", id="s1")
    assert not refused["ok"] and "--force" in refused["error"]
    marker.write_text("ok")
    assert (await world.call("node.wipe", id="s1", force=True))["ok"]
    back = await world.until(lambda: world.view("s1").wipe_status == "wiped"
                             and world.view("s1"), timeout=15)
    assert back.lifecycle.value == "READY" and back.wipe_attempt == 2


async def test_a_failed_wipe_step_quarantines_and_disable_retires(world: World) -> None:
    await world.agent("s1", 'steps:\n  - {name: ram_scrub, command: ["false"]}\n')
    assert (await world.call("node.claim", id="s1", user="ana"))["ok"]
    assert (await world.call("node.release", id="s1"))["ok"]
    view = await world.until(lambda: world.view("s1").lifecycle.value == "QUARANTINED"
                             and world.view("s1"))
    assert view.wipe_steps == {"ram_scrub": "exit 1"}
    assert view.lifecycle_reason == "wipe failed at ram_scrub: exit 1"
    assert (await world.call("node.disable", id="s1", reason="retired"))["ok"]
    assert world.view("s1").state == "DOWN" and world.view("s1").intent.value == "DISABLED"


async def test_conformance_drift_drains_a_sensitive_node_with_an_audit_entry(
        world: World) -> None:
    for node_id in ("s1", "s2", "s3"):
        await world.agent(node_id)
    await world.until(lambda: all(world.view(n).fingerprint for n in ("s1", "s2", "s3")))
    assert not any(world.view(n).drift for n in ("s1", "s2", "s3"))
    # a driver upgrade on s3 only: its fingerprint changes, the pool's majority does not
    reply = await world.nc.request("herd.agent.s3.inject",
                                   json.dumps({"fault": "driver", "value": 999}).encode(),
                                   timeout=10)
    assert json.loads(reply.data)["ok"]
    view = await world.until(lambda: world.view("s3").intent.value == "DRAINING"
                             and world.view("s3"))
    assert view.drift and view.fingerprint != view.fingerprint_expected
    events = await world.events("s3")
    record = [e for e in events if isinstance(e, NodeConformanceChanged) and e.drift][-1]
    [drain] = [e for e in events if isinstance(e, NodeDrainStarted)]
    assert drain.causation_id == record.event_id and drain.actor == "sensitive"
    assert not world.view("s1").drift and world.view("s1").intent.value == "ELIGIBLE"
    groups = (await world.call("node.conformance"))["result"]["items"]
    assert sorted((g["nodes"], g["drift"]) for g in groups) == [(1, True), (2, False)]
    listed = (await world.call("node.list", wide=False))["result"]["items"]
    assert {n["id"]: n["fingerprint_group"].endswith("DRIFT") for n in listed
            if n["id"].startswith("s")} == {"s1": False, "s2": False, "s3": True}


async def test_allocations_lost_on_a_sensitive_node_are_requeued_only_by_an_operator(
        world: World) -> None:
    from herdbook.events.job_events import Constraints, JobSpec, Resources

    await world.agent("s1")
    spec = JobSpec(id="secret", command=["sleep", "8"], count=1,
                   resources=Resources(cpu=0.01, memory_mb=1, gpus=1),
                   constraints=Constraints(node_class="sensitive"))
    import msgspec
    assert (await world.call("job.register", spec=msgspec.to_builtins(spec)))["ok"]
    assert world.plane.projector is not None
    allocs = world.plane.projector.allocs
    [first] = await world.until(lambda: [a for a in allocs.values() if a.status.value == "running"])
    await world.agent("s2")
    assert (await world.call("node.disable", id=first.node_id, reason="bad PSU"))["ok"]
    lost = await world.until(lambda: allocs[first.id].status.value == "lost" and allocs[first.id])
    assert lost.requeue_allowed is False
    await asyncio.sleep(1.0)
    assert [a.id for a in allocs.values()] == [first.id]     # nothing requeued by itself
    refused = await world.call("alloc.requeue", id="nope")
    assert not refused["ok"]
    done = await world.call("alloc.requeue", id=first.id[:8], reason="checked the node")
    assert done["ok"], done
    other = "s2" if first.node_id == "s1" else "s1"
    moved = await world.until(lambda: [a for a in allocs.values() if a.node_id == other
                                       and a.status.value == "running"])
    assert moved[0].previous_alloc == first.id and moved[0].requeue_count == 1
    again = await world.call("alloc.requeue", id=first.id)   # sent twice: already done
    assert again["ok"] and again["result"].get("unchanged"), again
    assert len([a for a in allocs.values() if a.previous_alloc == first.id]) == 1
