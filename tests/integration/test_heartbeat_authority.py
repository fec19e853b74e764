"""Heartbeats and health reports against a real nats-server and control plane: bound to
their subject, bounded memory under garbage, and a forged boot that cannot silence a node
(DESIGN §9, issue 13 items 5-7)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.control.plane import ControlPlane
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.streams import DAY, heartbeats_stream
from herdbook.events.subjects import HEARTBEATS_STREAM
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.reactors.sweeper import Sweeper
from tests.conftest import poll

DEEP = b"[" * 50_000 + b"]" * 50_000


async def register(nc: Any, *node_ids: str) -> None:
    store = EventStore(nc)
    for node_id in node_ids:
        await store.append(NodeRegistered(node_id=node_id, boot_id="b1"))
        await store.append(NodeBootChecked(node_id=node_id, boot_id="b1", passed=True))


async def started(nats_server: EmbeddedNats, tmp_path: Path) -> ControlPlane:
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp\nlifecycle: {heartbeat_timeout: 2s, "
                          "grace_period: {standard: 60s}}\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    return plane


async def until(predicate: Any, timeout: float = 15.0) -> None:
    await poll(predicate, timeout)


def sweeper_of(plane: ControlPlane) -> Sweeper:
    assert plane.sweeper is not None
    return plane.sweeper


async def test_a_forged_boot_with_a_huge_seq_does_not_silence_a_node(
        nc: Any, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    # given n1 READY and heartbeating every 0.3s (timeout 2s)
    await register(nc, "n1")
    plane = await started(nats_server, tmp_path)

    async def agent() -> None:
        for seq in range(1, 10_000):
            await nc.publish("herd.hb.n1", encode(Heartbeat(node_id="n1", boot_id="b1",
                                                            seq=seq)))
            await asyncio.sleep(0.3)

    beating = asyncio.create_task(agent())
    try:
        await asyncio.sleep(1.0)
        # when someone who may publish on herd.hb.n1 sends a made-up boot, twice
        for _ in range(2):
            await nc.publish("herd.hb.n1", encode(Heartbeat(node_id="n1", boot_id="evil",
                                                            seq=10**15)))
            await asyncio.sleep(0.5)
        # then for more than two heartbeat timeouts n1's own heartbeats still count
        sweeper = sweeper_of(plane)
        accepted = sweeper.accepted
        await asyncio.sleep(5.0)
        assert sweeper.accepted >= accepted + 10
        assert sweeper.unannounced_dropped == 2
        assert sweeper.beats["n1"].boot_id == "b1" and sweeper.beats["n1"].recent_boots == []
        assert plane.projector is not None
        assert plane.projector.nodes["n1"].lifecycle.value == "READY"
        history = await EventStore(nc).load("node", "n1")
        assert [e.event_name for _, e in history] == ["registered", "boot_checked"]
    finally:
        beating.cancel()
        await plane.stop()


async def test_garbage_heartbeats_and_health_reports_are_dead_lettered_once(
        nc: Any, nats_server: EmbeddedNats, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="herdbook.reactors")
    await register(nc, "n1", "n2")
    plane = await started(nats_server, tmp_path)
    dead: list[Any] = []

    async def collect(msg: Any) -> None:
        dead.append(msg)

    sub = await nc.subscribe("herd.deadletter.>", cb=collect)
    try:
        sweeper = sweeper_of(plane)
        await nc.publish("herd.hb.n1", encode(Heartbeat(node_id="n1", boot_id="b1", seq=1)))
        await until(lambda: "n1" in sweeper.beats and sweeper.beats["n1"].seq == 1)
        n2_before = sweeper.beats["n2"]
        # when garbage arrives: an id with ANSI escapes, a body naming another node, and
        # 50k-deep nested bodies on a heartbeat and a health report subject
        bad = "n\x1b[31m1"
        await nc.publish(f"herd.hb.{bad}", encode(Heartbeat(node_id=bad, boot_id="b1",
                                                            seq=1)))
        await nc.publish("herd.hb.n1", encode(Heartbeat(node_id="n2", boot_id="evil",
                                                        seq=10**15)))
        await nc.publish("herd.hb.n1", b'{"node_id":"n1","boot_id":"b1","x":' + DEEP + b"}")
        await nc.publish("herd.health.n1", b'{"node_id":"n1","x":' + DEEP + b"}")
        # then each is dead-lettered once, with its reason, and counted
        await until(lambda: len(dead) == 4)
        await asyncio.sleep(2.0)
        assert sorted(m.subject for m in dead) == ["herd.deadletter.HERD_HEALTH",
                                                   *["herd.deadletter.HERD_HEARTBEATS"] * 3]
        assert all("\x1b" not in (m.headers or {}).get("Herd-Subject", "x") for m in dead)
        assert sweeper.deadlettered == 3
        assert plane.classifier is not None and plane.classifier.deadlettered == 1
        # and nothing of n1 or n2 moved, nothing was kept for the bad id
        assert sweeper.beats["n1"].seq == 1 and sweeper.beats["n1"].boot_id == "b1"
        assert sweeper.beats["n2"] == n2_before
        assert set(sweeper.beats) == {"cp", "n1", "n2"}
        # and the log holds a few lines, never one per retry
        lines = [r for r in caplog.records if r.name.startswith("herdbook.reactors")
                 and "dead-lettered" in r.getMessage()]
        assert 1 <= len(lines) <= 4
        assert all("\x1b" not in r.getMessage() for r in lines)
    finally:
        await sub.unsubscribe()
        await plane.stop()


async def test_heartbeats_of_unknown_nodes_cost_no_memory_and_expire(
        nc: Any, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    await register(nc, "n1")
    plane = await started(nats_server, tmp_path)
    try:
        sweeper = sweeper_of(plane)
        # when 20k made-up nodes heartbeat
        for i in range(20_000):
            await nc.publish(f"herd.hb.u{i}", encode(Heartbeat(node_id=f"u{i}", boot_id="b",
                                                               seq=1)))
        await nc.flush()
        await until(lambda: sweeper.unknown_dropped == 20_000, timeout=30.0)
        # then nothing per node grew
        assert set(sweeper.beats) <= {"cp", "n1"}
        assert len(sweeper.deadlines.armed) <= 2 and len(sweeper.deadlines.heap) <= 10
        assert sweeper.intake.unannounced == {}
    finally:
        await plane.stop()
    # when the control plane starts again, it reads them back but keeps nothing of them
    plane = await started(nats_server, tmp_path)
    try:
        sweeper = sweeper_of(plane)
        assert sweeper.unknown_dropped == 20_000
        assert set(sweeper.beats) <= {"cp", "n1"}
    finally:
        await plane.stop()
    # and once they are older than the stream's age limit they are gone: the next start
    # reads none of them
    js = nc.jetstream()
    await js.update_stream(heartbeats_stream(1, max_age_s=1.0))
    await asyncio.sleep(2.0)
    info = await js.stream_info(HEARTBEATS_STREAM)
    assert info.state.messages == 0
    plane = await started(nats_server, tmp_path)
    try:
        assert sweeper_of(plane).unknown_dropped == 0
    finally:
        await plane.stop()


async def test_an_existing_heartbeats_stream_gets_the_age_limit_at_start(nc: Any) -> None:
    # given HERD_HEARTBEATS as an older release created it: no age limit
    js = nc.jetstream()
    await js.update_stream(replace(heartbeats_stream(), max_age=0.0, duplicate_window=10.0))
    assert (await js.stream_info(HEARTBEATS_STREAM)).config.max_age in (0, 0.0, None)
    # when a control plane starts (it ensures the streams), then it expires after a day
    await ensure_streams(nc, 1, 3600.0)
    assert (await js.stream_info(HEARTBEATS_STREAM)).config.max_age == DAY
