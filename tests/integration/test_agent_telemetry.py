"""Per-GPU telemetry from a real agent against a real nats-server (issue 27 items 1-2):
one sample of every GPU every --telemetry-interval on ``herd.gpu.<node>``, the last one
kept per node in HERD_HEARTBEATS (never in HERD_EVENTS), none with the interval off; an
existing HERD_HEARTBEATS gains the subject on upgrade; and stolen agent credentials can
neither write another node's telemetry nor pass a forged body through the binding."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.js.errors import NotFoundError

from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.nats_parts import ensure_streams
from herdbook.control.plane import ControlPlane
from herdbook.credentials import NatsAuth
from herdbook.events.agent_requests import InjectReply, InjectRequest
from herdbook.events.authority import Unvouched, bind_telemetry
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.streams import heartbeats_stream
from herdbook.events.subjects import (
    EVENTS_STREAM,
    HEARTBEATS_STREAM,
    heartbeat_subject,
    inject_subject,
    telemetry_subject,
)
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from tests.conftest import poll
from tests.integration.test_agent_executor import eventually
from tests.integration.test_auth import connect_as, issue, plane  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


class Running:
    def __init__(self) -> None:
        self.agents: list[tuple[Agent, asyncio.Task[None]]] = []

    async def start(self, options: AgentOptions) -> Agent:
        agent = Agent(options)
        self.agents.append((agent, asyncio.create_task(agent.run())))
        await asyncio.wait_for(agent.registered.wait(), 20)
        return agent


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    agents = Running()
    try:
        yield agents
    finally:
        for agent, task in agents.agents:
            await agent.stop()
            await asyncio.wait_for(task, 15)


async def _async(value: object) -> object:
    return value


async def test_the_agent_publishes_every_gpu_at_the_interval_and_the_stream_keeps_the_last(
        nc: Any, running: Running, tmp_path: Path) -> None:
    await ensure_streams(nc, 1, 3600.0)
    seen: list[tuple[float, Any]] = []

    async def on_sample(msg: Any) -> None:
        seen.append((time.monotonic(), msg))

    await nc.subscribe("herd.gpu.*", cb=on_sample)
    agent = await running.start(AgentOptions(
        server=nc.connected_url.geturl(), node_id="gpu-1", state_dir=str(tmp_path / "a"),
        heartbeat_interval=0.2, fake_gpus=4, telemetry_interval=0.5))
    await eventually(lambda: _async(len(seen) >= 5), what="five samples")
    samples = [bind_telemetry(msg.subject, msg.data) for _, msg in seen]
    assert {msg.subject for _, msg in seen} == {"herd.gpu.gpu-1"}
    assert all(s.node_id == "gpu-1" and s.boot_id == agent.boot_id for s in samples)
    assert all([g.index for g in s.gpus] == [0, 1, 2, 3] for s in samples)
    assert all(g.temperature_c is not None and g.uuid for s in samples for g in s.gpus)
    gaps = [b - a for (a, _), (b, _) in zip(seen, seen[1:], strict=False)]
    assert 0.3 <= statistics.median(gaps) <= 1.0, gaps   # every 0.5 s (2 busy cores)

    # the fake's readings move with an injected fault, in the next sample
    reply = await nc.request(inject_subject("gpu-1"), msgspec.json.encode(
        InjectRequest(fault="thermal", gpu=2, value=92)), timeout=10)
    assert msgspec.json.decode(reply.data, type=InjectReply).ok

    def hot() -> GpuReading | None:
        last = bind_telemetry(seen[-1][1].subject, seen[-1][1].data)
        return last.gpus[2] if last.gpus[2].temperature_c == 92.0 else None

    reading = await eventually(lambda: _async(hot()), what="GPU 2 at 92 °C")
    assert reading is not None and "sw_thermal" in (reading.throttle_names or ())

    # HERD_HEARTBEATS keeps one message for the node's subject: the last sample
    js = nc.jetstream()
    info = await js.stream_info(HEARTBEATS_STREAM, subjects_filter="herd.gpu.>")
    assert info.state.subjects == {"herd.gpu.gpu-1": 1}
    last = await js.get_last_msg(HEARTBEATS_STREAM, telemetry_subject("gpu-1"))
    assert isinstance(bind_telemetry(last.subject, last.data), GpuTelemetry)
    # ...and not one in the event log
    with pytest.raises(NotFoundError):
        await js.get_last_msg(EVENTS_STREAM, "herd.gpu.gpu-1")
    assert agent.telemetry_sent >= len(seen)


async def test_with_the_interval_off_the_agent_publishes_no_telemetry(
        nc: Any, running: Running, tmp_path: Path) -> None:
    await ensure_streams(nc, 1, 3600.0)
    seen: list[Any] = []

    async def on_sample(msg: Any) -> None:
        seen.append(msg)

    await nc.subscribe("herd.gpu.>", cb=on_sample)
    agent = await running.start(AgentOptions(
        server=nc.connected_url.geturl(), node_id="gpu-2", state_dir=str(tmp_path / "a"),
        heartbeat_interval=0.2, fake_gpus=8, telemetry_interval=None))
    js = nc.jetstream()
    # not stored yet is "not yet", not a failure (the agent may not have beaten at all)
    first = await poll(lambda: js.get_last_msg(HEARTBEATS_STREAM, heartbeat_subject("gpu-2")),
                       30, "gpu-2's first heartbeat", interval=0.1, ignoring=(NotFoundError,))
    await asyncio.sleep(2.0)   # four default-test intervals' worth of heartbeats
    later = await js.get_last_msg(HEARTBEATS_STREAM, heartbeat_subject("gpu-2"))
    assert later.seq > first.seq   # it is alive and heartbeating...
    assert seen == [] and agent.telemetry_sent == 0   # ...and sends no telemetry
    with pytest.raises(NotFoundError):
        await js.get_last_msg(HEARTBEATS_STREAM, telemetry_subject("gpu-2"))


async def test_an_existing_heartbeats_stream_gains_the_gpu_subjects_on_upgrade(nc: Any) -> None:
    # given HERD_HEARTBEATS as an earlier release created it, with a node's heartbeat
    js = nc.jetstream()
    current = heartbeats_stream(max_age_s=3600.0)
    old = replace(current, subjects=[s for s in current.subjects or [] if s != "herd.gpu.*"])
    await js.delete_stream(HEARTBEATS_STREAM)   # the fixture's, of this release
    await js.add_stream(old)
    beat = Heartbeat(node_id="n1", boot_id="b1", seq=7)
    await js.publish("herd.hb.n1", encode(beat))
    with pytest.raises(Exception):  # noqa: B017 - no stream takes herd.gpu.* yet
        await js.publish("herd.gpu.n1", b"{}", timeout=1.0)
    # when this release starts
    await ensure_streams(nc, 1, 3600.0, 3600.0)
    # then the stream carries herd.gpu.*, with what it held, still one message per subject
    info = await js.stream_info(HEARTBEATS_STREAM)
    assert "herd.gpu.*" in (info.config.subjects or [])
    assert info.config.max_msgs_per_subject == 1
    assert (await js.get_last_msg(HEARTBEATS_STREAM, "herd.hb.n1")).data == encode(beat)
    for temperature in (40.0, 41.0):
        body = GpuTelemetry(node_id="n1", boot_id="b1",
                            gpus=(GpuReading(index=0, temperature_c=temperature),))
        await js.publish("herd.gpu.n1", encode(body))
    last = await js.get_last_msg(HEARTBEATS_STREAM, "herd.gpu.n1")
    assert bind_telemetry(last.subject, last.data).gpus[0].temperature_c == 41.0
    info = await js.stream_info(HEARTBEATS_STREAM, subjects_filter="herd.gpu.>")
    assert info.state.subjects == {"herd.gpu.n1": 1}


async def test_stolen_agent_credentials_cannot_forge_another_nodes_telemetry(
        plane: ControlPlane, running: Running, tmp_path: Path) -> None:  # noqa: F811
    # given n2's agent publishing its telemetry every 0.3 s, with its own credentials
    creds = {node: await issue(tmp_path, "agent", node) for node in ("n1", "n2")}
    victim = await running.start(AgentOptions(
        server=plane.url, node_id="n2", state_dir=str(tmp_path / "n2"), heartbeat_interval=0.3,
        fake_gpus=2, telemetry_interval=0.3, auth=NatsAuth(creds=str(creds["n2"]))))
    assert plane.nc is not None
    js = plane.nc.jetstream()
    await eventually(lambda: _async(victim.telemetry_sent >= 2), what="n2's telemetry")

    # when n1's stolen credentials send n2 a melting GPU: on n2's subject, and on n1's own
    hot = GpuTelemetry(node_id="n2", boot_id=victim.boot_id,
                       gpus=(GpuReading(index=0, temperature_c=99.0, ecc_dbe_volatile=9),))
    errors: list[str] = []
    attacker = await connect_as(plane, creds["n1"], errors)
    forged_seqs = []
    try:
        await attacker.publish("herd.gpu.n2", encode(hot))
        await attacker.flush()
        await eventually(lambda: _async(any('"herd.gpu.n2"' in e for e in errors)),
                         what="the publish on n2's subject refused by NATS")
        # its own subject it may publish on: NATS stores the bodies, the binding refuses them
        for body in (encode(hot), encode(Heartbeat(node_id="n1", boot_id="b1", seq=1))):
            forged_seqs.append((await attacker.jetstream().publish("herd.gpu.n1", body)).seq)
    finally:
        await attacker.close()

    # then n2's stored telemetry is still n2's own...
    await asyncio.sleep(1.0)
    last = await js.get_last_msg(HEARTBEATS_STREAM, telemetry_subject("n2"))
    own = bind_telemetry(last.subject, last.data)
    assert own.boot_id == victim.boot_id and len(own.gpus) == 2
    assert own.gpus[0].temperature_c is not None and own.gpus[0].temperature_c < 85
    assert own.gpus[0].ecc_dbe_volatile == 0
    # ...and what n1 stored on its own subject binds to nothing (the last one, the other
    # was replaced: one message per subject)
    stored = await js.get_last_msg(HEARTBEATS_STREAM, telemetry_subject("n1"))
    assert stored.seq == forged_seqs[-1]
    with pytest.raises(Unvouched, match="no GPU"):
        bind_telemetry(stored.subject, stored.data)
    with pytest.raises(Unvouched, match="names node 'n2'"):
        bind_telemetry("herd.gpu.n1", encode(hot))
    log = (plane.data_dir / "nats" / "nats-server.log").read_text()
    assert 'Publish Violation - Subject "herd.gpu.n2"' in log
