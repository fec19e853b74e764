"""A stream deleted from outside comes back: the control plane recreates it (one ERROR
line naming it), the API keeps answering, and new registrations and appends land."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import KeyValueConfig

from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.control.streams_guard import StreamsGuard, unreached_seq
from herdbook.events.node import NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.streams import all_streams
from herdbook.events.subjects import EVENTS_STREAM, HEALTH_STREAM, HEARTBEATS_STREAM
from tests.conftest import free_port
from tests.fakes import FakeClock
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with running_plane(f"nats: {{port: {free_port()}}}\ndata_dir: '{tmp_path / 'd'}'\n"
                             "node_id: cp-guard\nlifecycle: {heartbeat_timeout: 5s}\n") as control:
        yield control


T0 = datetime.fromtimestamp(1_795_000_000, UTC)


async def api(nc: Any, route: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(f"herd.api.v1.{route}", json.dumps(body).encode(), timeout=10)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def listed(nc: Any, node_id: str) -> bool:
    reply = await api(nc, "node.list", {})
    return reply["ok"] and node_id in {n["id"] for n in reply["result"]["items"]}


async def test_deleted_streams_are_recreated_and_the_api_answers(
        plane: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    nc = await nats.connect(plane.url)
    js = nc.jetstream()
    agents: list[tuple[Agent, asyncio.Task[None]]] = []

    def start_agent(node_id: str) -> Agent:
        agent = Agent(AgentOptions(server=plane.url, node_id=node_id, fake_gpus=2,
                                   state_dir=str(tmp_path / node_id), heartbeat_interval=0.2))
        agents.append((agent, asyncio.create_task(agent.run())))
        return agent

    try:
        await asyncio.wait_for(start_agent("gpu-1").registered.wait(), 15)
        await eventually(lambda: listed(nc, "gpu-1"))
        before = (await js.stream_info(EVENTS_STREAM)).state.last_seq

        # given: both streams deleted from outside, with the control plane's own rights
        with caplog.at_level(logging.ERROR, logger="herdbook.control.streams_guard"):
            await js.delete_stream(EVENTS_STREAM)
            await js.delete_stream(HEARTBEATS_STREAM)

            # then: back within a few seconds, logged once each
            async def back() -> bool:
                await js.stream_info(EVENTS_STREAM)
                await js.stream_info(HEARTBEATS_STREAM)
                return True

            await eventually(back, timeout=5)
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR
                  and r.name == "herdbook.control.streams_guard"]
        assert sorted(e.split()[1] for e in errors) == [EVENTS_STREAM, HEARTBEATS_STREAM]
        info = await js.stream_info(EVENTS_STREAM)
        assert info.config.deny_delete and info.config.deny_purge and info.config.allow_atomic
        # the sequence goes on after what was read, so the readers resume
        assert info.state.first_seq > before

        # the API answers, it does not say "internal error"
        reply = await api(nc, "node.list", {})
        assert reply["ok"], reply
        assert (await api(nc, "status", {}))["ok"]

        # an append lands, and a new agent registers and shows in the view
        seq = await EventStore(nc).append(NodeRegistered(node_id="late", boot_id="b"),
                                          expected_version=0)
        assert seq > before
        await asyncio.wait_for(start_agent("gpu-2").registered.wait(), 15)
        await eventually(lambda: listed(nc, "gpu-2"), timeout=30)
        await eventually(lambda: listed(nc, "late"), timeout=5)
    finally:
        for agent, task in agents:
            await agent.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await nc.close()


async def test_every_guard_hears_of_a_stream_created_again_and_a_bucket_comes_back(
        nc: Any) -> None:
    """Another replica's guard (or anyone) created HERD_EVENTS again: this guard finds it
    by its creation time and says from which sequence; a bucket it saw, deleted, is made
    again by its owner's coroutine, one not there at the first check is left to its owner.
    (``check`` called by hand: a running guard would race the test to recreate it.)"""
    js = nc.jetstream()
    heard: list[tuple[str, int]] = []
    made: list[str] = []

    async def recreated(stream: str, first_seq: int, created: str) -> None:
        heard.append((stream, first_seq))

    async def make_bucket() -> None:
        made.append("herd_test")
        await js.create_key_value(KeyValueConfig(bucket="herd_test", history=1))

    guard = StreamsGuard(nc, all_streams(), buckets={"KV_herd_test": make_bucket},
                         on_recreated=recreated, exact={EVENTS_STREAM}, clock=FakeClock(T0))
    assert await guard.check() == [] and made == []   # the first check: its owner makes it
    await make_bucket()
    assert await guard.check() == [] and heard == []

    config = (await js.stream_info(EVENTS_STREAM)).config
    await js.delete_stream(EVENTS_STREAM)
    await js.add_stream(dataclasses.replace(config, first_seq=40))
    await js.delete_stream("KV_herd_test")
    assert await guard.check() == ["KV_herd_test"]
    assert heard == [(EVENTS_STREAM, 40)] and len(made) == 2
    await js.stream_info("KV_herd_test")
    assert await guard.check() == [] and heard == [(EVENTS_STREAM, 40)]

    # a stream whose readers' positions it cannot see starts beyond any of them
    await js.publish("herd.health.n1", b"{}")
    await guard.check()
    await js.delete_stream(HEALTH_STREAM)
    assert await guard.check() == [HEALTH_STREAM]
    assert heard[-1] == (HEALTH_STREAM, unreached_seq(T0))
    assert (await js.stream_info(HEALTH_STREAM)).config.first_seq == unreached_seq(T0)


async def test_a_bucket_it_owns_later_tells_its_reader_when_created_again(nc: Any) -> None:
    """A bucket handed to ``own`` after start (the HTTP tokens'): created again by anyone
    between two checks, or missing and made again by the guard, its reader hears once."""
    js = nc.jetstream()
    told: list[int] = []

    async def make_bucket() -> None:
        await js.create_key_value(KeyValueConfig(bucket="herd_read", history=1))

    async def reader() -> None:
        told.append(len(told) + 1)

    guard = StreamsGuard(nc, [], clock=FakeClock(T0))
    await guard.check()
    await make_bucket()
    await guard.own("KV_herd_read", make_bucket, reader)
    assert await guard.check() == [] and told == []
    await js.delete_key_value("herd_read")   # someone else makes it again first
    await make_bucket()
    assert await guard.check() == [] and told == [1]
    await js.delete_key_value("herd_read")
    assert await guard.check() == ["KV_herd_read"] and told == [1, 2]
    assert await guard.check() == [] and told == [1, 2]


def test_a_lost_stream_starts_beyond_any_sequence_a_reader_reached() -> None:
    assert unreached_seq(T0) == 1_795_000_000_000_000
    assert unreached_seq(T0 + timedelta(microseconds=1)) == unreached_seq(T0) + 1


async def test_a_running_view_is_rebased_and_then_follows_the_new_stream(
        plane: ControlPlane, tmp_path: Path) -> None:
    """While running: the rebased rows are committed, then the new stream is recorded as
    the view's, so the view's snapshots match the stream a new replica finds."""
    nc = await nats.connect(plane.url)
    js = nc.jetstream()
    try:
        assert (await api(nc, "node.add", {"id": "old"}))["ok"]
        await js.delete_stream(EVENTS_STREAM)

        def recorded() -> tuple[str, int]:
            db = sqlite3.connect(f"file:{tmp_path / 'd' / 'view.db'}?mode=ro", uri=True)
            try:
                created = db.execute("SELECT created FROM stream_identity").fetchone()[0]
                data = db.execute("SELECT data FROM nodes WHERE id = 'old'").fetchone()[0]
            finally:
                db.close()
            return str(created), int(json.loads(data)["version"])

        async def rebased() -> bool:
            info = await js.stream_info(EVENTS_STREAM)
            return recorded() == (str(info.created), 0)

        await eventually(rebased, timeout=10)
        reply = await api(nc, "node.cordon", {"id": "old"})
        assert reply["ok"], reply
    finally:
        await nc.close()


async def test_a_view_rebuild_after_a_loss_is_refused_with_the_way_to_an_empty_fleet(
        plane: ControlPlane) -> None:
    """A view folded from a stream created again after a loss would forget every node
    the lost events made; `herd view rebuild` refuses it in one line, naming what to do
    for an empty fleet (and never waits for the empty stream's last sequence)."""
    nc = await nats.connect(plane.url)
    js = nc.jetstream()
    try:
        assert (await api(nc, "node.add", {"id": "old"}))["ok"]
        await js.delete_stream(EVENTS_STREAM)

        async def back() -> bool:
            return bool((await js.stream_info(EVENTS_STREAM)).config.first_seq)

        await eventually(back, timeout=10)
        reply = await api(nc, "view.rebuild", {})
        assert not reply["ok"] and reply["code"] == "refused", reply
        assert "move " in reply["error"] and "view.db" in reply["error"], reply
        assert await listed(nc, "old")
        # the rebuild the control plane starts itself (a view ahead after its server
        # restarted) is not refused, and returns at once on the empty stream
        done = await asyncio.wait_for(plane.rebuild_view(after_loss=True), 30)
        assert done["nodes"] == 0
    finally:
        await nc.close()
