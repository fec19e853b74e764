"""The agent and the control plane in-process against a real nats-server."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.errors import StartupError
from herdbook.control.nats_parts import check_server_version
from herdbook.control.plane import ControlPlane
from herdbook.events.codec import decode_heartbeat, encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import EventStore, subject_of
from herdbook.events.subjects import EVENTS_STREAM, HEARTBEATS_STREAM, heartbeat_subject
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import herd, poll


async def last_heartbeat_seq(nc, node_id: str) -> int:  # type: ignore[no-untyped-def]
    msg = await nc.jetstream().get_last_msg(HEARTBEATS_STREAM, heartbeat_subject(node_id))
    return decode_heartbeat(msg.data).seq


async def eventually(predicate, timeout: float = 15.0):  # type: ignore[no-untyped-def]
    """Any exception is "not there yet" (a request to a plane still starting)."""
    return await poll(predicate, timeout, interval=0.1, ignoring=(Exception,))


async def test_agent_survives_a_nats_server_restart_and_resumes(tmp_path: Path) -> None:
    import nats

    from herdbook.control.nats_parts import ensure_streams
    from tests.conftest import free_port

    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    server.start()
    probe = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    await ensure_streams(probe, 1, 3600.0)
    agent = Agent(AgentOptions(server=server.url, node_id="gpu-7", state_dir=str(tmp_path / "a"),
                               heartbeat_interval=0.1, fake_gpus=4))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 10)
        before = await eventually(lambda: last_heartbeat_seq(probe, "gpu-7"))
        server.stop()
        await asyncio.sleep(1.0)
        server.start()
        after = await eventually(
            lambda: _newer(probe, "gpu-7", before), timeout=20)
        assert after > before
        # the boot check may have been in flight when the server went away: it lands
        # after the restart, once, and the agent does not register again
        async def both() -> list[str]:
            events = await EventStore(probe).load("node", "gpu-7")
            names = [type(e).__name__ for _, e in events]
            return names if len(names) >= 2 else []

        assert await eventually(both, timeout=20) == ["NodeRegistered", "NodeBootChecked"]
    finally:
        await agent.stop()
        await task
        await probe.close()
        server.stop()

    # restarted with its state dir: no second registration, seq keeps growing
    server.start()
    probe = await nats.connect(server.url)
    agent = Agent(AgentOptions(server=server.url, node_id="gpu-7", state_dir=str(tmp_path / "a"),
                               heartbeat_interval=0.1, fake_gpus=4))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 10)
        assert await eventually(lambda: _newer(probe, "gpu-7", after)) > after
        types = [type(e).__name__ for _, e in await EventStore(probe).load(
            "node", "gpu-7")]
        assert types.count("NodeRegistered") == 1 and types[-2:] == [
            "NodeBootStarted", "NodeBootChecked"]
    finally:
        await agent.stop()
        await task
        await probe.close()
        server.stop()


async def _newer(nc, node_id: str, than: int) -> int:  # type: ignore[no-untyped-def]
    seq = await last_heartbeat_seq(nc, node_id)
    return seq if seq > than else 0


def test_servers_older_than_2_11_are_refused() -> None:
    check_server_version("2.11.0")
    check_server_version("2.15.1")
    check_server_version("v3.0.0-beta")
    for old in ("2.9.25", "2.10.22", "1.4.1"):
        with pytest.raises(StartupError, match="2.11 or newer"):
            check_server_version(old)


async def test_list_pages_under_max_payload_and_the_cli_follows_them(nc, nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    count = 12_000
    for i in range(count):
        event = NodeRegistered(node_id=f"node-{i:05d}", boot_id="b")
        await nc.publish(subject_of(event), encode(event))
    await nc.flush()
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp-page\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        assert plane.projector is not None
        await eventually(lambda: _count(plane, count + 1), timeout=30)
        first = await nc.request("herd.api.v1.node.list", b'{"wide": true}', timeout=10)
        page = json.loads(first.data)["result"]
        assert len(first.data) < 1024 * 1024 and page["next_token"] is not None
        assert len(page["items"]) < count
        result = await asyncio.to_thread(herd, "node", "list", "-o", "json",
                                         server=nats_server.url, timeout=60)
        assert result.returncode == 0, result.stderr
        ids = [n["id"] for n in json.loads(result.stdout)]
        assert len(ids) == count + 1 and len(set(ids)) == count + 1
        # the view rebuild gives the same nodes
        rebuilt = await asyncio.to_thread(herd, "view", "rebuild", server=nats_server.url,
                                          timeout=60)
        assert rebuilt.returncode == 0 and "Ok" in rebuilt.stdout, rebuilt.stderr
        assert len(plane.projector.nodes) == count + 1
        js = nc.jetstream()
        assert plane.projector.committed_seq == (await js.stream_info(EVENTS_STREAM)).state.last_seq
    finally:
        await plane.stop()


async def _count(plane: ControlPlane, n: int) -> bool:
    assert plane.projector is not None
    return len(plane.projector.nodes) >= n


async def test_a_restarted_control_plane_ages_stored_heartbeats_on_the_server_clock(  # type: ignore[no-untyped-def]
        nc, nats_server, tmp_path) -> None:
    store = EventStore(nc)
    for node_id in ("stale", "fresh"):
        await store.append(NodeRegistered(node_id=node_id, boot_id="b1"))
        await store.append(NodeBootChecked(node_id=node_id, boot_id="b1", passed=True))

    async def beat(node_id: str, seq: int) -> None:
        # the agent's clock is an hour off: it must not matter
        hb = Heartbeat(node_id=node_id, boot_id="b1", seq=seq, sent_at=time.time() - 3600)
        await nc.publish(heartbeat_subject(node_id), encode(hb))
        await nc.flush()

    await beat("stale", 1)
    await asyncio.sleep(2.5)
    await beat("fresh", 1)
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp-r\nlifecycle: {heartbeat_timeout: 2s, "
                          "grace_period: {standard: 60s}}\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    starting = time.monotonic()
    await plane.start()
    try:
        assert plane.projector is not None and plane.sweeper is not None
        views = plane.projector.nodes
        # both are aged on the server's clock, not on the agent's nor from this start
        assert plane.sweeper.heartbeat_age("stale") >= 2.5
        assert plane.sweeper.heartbeat_age("fresh") < 1.0

        async def keep_beating() -> None:
            for seq in range(2, 22):
                await beat("fresh", seq)
                await asyncio.sleep(0.3)

        beating = asyncio.create_task(keep_beating())
        # the stale node is past its timeout, but a control plane that starts observes
        # for one heartbeat timeout before it declares (DESIGN §9): DEGRADED then
        await eventually(lambda: _lifecycle_is(plane, "stale", "DEGRADED"), timeout=4.0)
        assert time.monotonic() - starting >= 2.0
        # the fresh one keeps beating and never degrades
        await beating
        assert views["fresh"].lifecycle.value == "READY"
        assert views["stale"].lifecycle.value == "DEGRADED"
    finally:
        await plane.stop()


async def _lifecycle_is(plane: ControlPlane, node_id: str, lifecycle: str) -> bool:
    assert plane.projector is not None
    return plane.projector.nodes[node_id].lifecycle.value == lifecycle
