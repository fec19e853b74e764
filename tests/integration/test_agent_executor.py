"""The agent runs its node's allocations against a real nats-server: placed → running →
ended, stopped on request, and reattached after an agent restart."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from herdbook.agent import main, procs
from herdbook.agent.main import Agent, AgentOptions
from herdbook.agent.workload_state import StateFile
from herdbook.control.agent_sync import AgentSync
from herdbook.events.alloc import (
    AllocCompleted,
    AllocEvent,
    AllocPlaced,
    AllocRunning,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.events.codec import decode_heartbeat
from herdbook.events.store import EventStore
from herdbook.events.subjects import HEARTBEATS_STREAM, heartbeat_subject
from tests.conftest import poll

NODE = "gpu-1"


async def eventually(predicate: Callable[[], Any], timeout: float = 30.0,
                     what: str = "") -> Any:
    return await poll(predicate, timeout, what, interval=0.1)


class Fleet:
    """Agents of one node run in-process; every workload they started is killed at the end."""

    def __init__(self, url: str, nc: Any, state_dir: Path) -> None:
        self.url = url
        self.store = EventStore(nc)
        self.js = nc.jetstream()
        self.state_dir = state_dir
        self.running: list[tuple[Agent, asyncio.Task[None]]] = []
        self.pids: set[int] = set()

    def agent(self) -> Agent:
        return Agent(AgentOptions(server=self.url, node_id=NODE, state_dir=str(self.state_dir),
                                  heartbeat_interval=0.1, fake_gpus=2))

    async def start(self, agent: Agent | None = None) -> Agent:
        agent = agent or self.agent()
        self.running.append((agent, asyncio.create_task(agent.run())))
        await asyncio.wait_for(agent.registered.wait(), 10)
        return agent

    async def stop(self, agent: Agent) -> None:
        for pair in list(self.running):
            if pair[0] is agent:
                self.running.remove(pair)
                await agent.stop()
                try:   # an agent that does not stop fails the test, never hangs the suite
                    await asyncio.wait_for(asyncio.shield(pair[1]), 20)
                except TimeoutError:
                    pair[1].cancel()
                    raise AssertionError("the agent did not stop within 20 s") from None

    async def place(self, alloc_id: str, command: list[str]) -> None:
        await self.store.append(AllocPlaced(node_id=NODE, alloc_id=alloc_id, job_id="job-1",
                                            eval_id="eval-1", index=0, command=command))

    async def events(self, alloc_id: str) -> list[AllocEvent]:
        out = [e for _, e in await self.store.load("alloc", NODE)
               if isinstance(e, AllocEvent) and e.alloc_id == alloc_id]
        self.pids |= {e.pid for e in out if isinstance(e, AllocRunning)}
        return out

    async def has(self, alloc_id: str, kind: type[AllocEvent]) -> AllocEvent | None:
        return next((e for e in await self.events(alloc_id) if isinstance(e, kind)), None)

    def state(self) -> StateFile:
        return msgspec.json.decode((self.state_dir / "agent-state.json").read_bytes(),
                                   type=StateFile)


@pytest.fixture
async def fleet(nats_server, nc, tmp_path) -> AsyncIterator[Fleet]:  # type: ignore[no-untyped-def]
    fleet = Fleet(nats_server.url, nc, tmp_path / "agent")
    sync = AgentSync(nc)   # the control plane's part an agent needs: its catch-up reads
    await sync.start()
    try:
        yield fleet
    finally:
        await sync.stop()
        for agent, _ in list(fleet.running):
            await fleet.stop(agent)
        for pid in fleet.pids:
            procs.signal_group(pid, signal.SIGKILL)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


async def test_a_placed_allocation_runs_and_completes(fleet: Fleet) -> None:
    await fleet.start()

    await fleet.place("a1", ["sh", "-c", "echo hello from $HERD_ALLOC_ID"])
    done = await eventually(lambda: fleet.has("a1", AllocCompleted), what="alloc.completed")

    kinds = [type(e).__name__ for e in await fleet.events("a1")]
    assert kinds == ["AllocPlaced", "AllocRunning", "AllocCompleted"]
    assert done.actor == f"agent:{NODE}"
    assert (fleet.state_dir / "allocs" / "a1.log").read_text() == "hello from a1\n"


async def test_a_stop_request_stops_the_workload(fleet: Fleet) -> None:
    await fleet.start()
    await fleet.place("a1", ["sleep", "60"])
    running = await eventually(lambda: fleet.has("a1", AllocRunning), what="alloc.running")

    await fleet.store.append(AllocStopRequested(node_id=NODE, alloc_id="a1", reason="job stop",
                                                kill_timeout_s=60))
    stopped = await eventually(lambda: fleet.has("a1", AllocStopped), what="alloc.stopped")

    assert isinstance(stopped, AllocStopped) and stopped.exit_code == 128 + signal.SIGTERM
    assert not procs.is_alive(running.pid, None)


async def test_a_restarted_agent_reattaches_to_the_workload_it_left_running(
        fleet: Fleet) -> None:
    first = await fleet.start()
    await fleet.place("a1", ["sleep", "60"])
    running = await eventually(lambda: fleet.has("a1", AllocRunning), what="alloc.running")
    pid = running.pid

    await fleet.stop(first)

    assert procs.is_alive(pid, None)
    assert [(e.alloc_id, e.pid) for e in fleet.state().allocs] == [("a1", pid)]

    second = fleet.agent()
    assert second.executor.reattaching and second.make_heartbeat().reattaching
    await fleet.start(second)

    async def reattached() -> AllocRunning | None:
        return next((e for e in await fleet.events("a1")
                     if isinstance(e, AllocRunning) and e.reattached), None)

    again = await eventually(reattached, what="alloc.running with reattached")
    assert again.pid == pid and not second.executor.reattaching

    async def counted() -> bool:
        msg = await fleet.js.get_last_msg(HEARTBEATS_STREAM, heartbeat_subject(NODE))
        beat = decode_heartbeat(msg.data)
        return beat.boot_id == second.boot_id and beat.running_allocs == 1

    await eventually(counted, what="a heartbeat counting the reattached workload")

    await fleet.store.append(AllocStopRequested(node_id=NODE, alloc_id="a1", kill_timeout_s=60))
    await eventually(lambda: fleet.has("a1", AllocStopped), what="alloc.stopped")
    assert not procs.is_alive(pid, None)
    assert fleet.state().allocs == []


async def test_an_allocation_placed_while_the_agent_is_disconnected_runs_after_it_reconnects(
        fleet: Fleet, nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The agent holds no consumer: its core subscription misses what is published while
    it is away, and the catch-up read after its reconnect brings it (issue 13)."""
    import nats

    agent = await fleet.start()
    await fleet.place("a1", ["sh", "-c", "exit 0"])
    await eventually(lambda: fleet.has("a1", AllocCompleted), what="a1 completed")
    await asyncio.to_thread(nats_server.stop)
    await asyncio.to_thread(nats_server.start)
    # Placed at once, before the agent's reconnect (it waits a second between attempts).
    writer = await nats.connect(nats_server.url)
    try:
        await EventStore(writer).append(AllocPlaced(
            node_id=NODE, alloc_id="a2", job_id="job-1", eval_id="eval-1", index=0,
            command=["sh", "-c", "exit 0"]))
        assert not agent.nc.is_connected   # type: ignore[union-attr]
        await eventually(lambda: _has(writer, "a2", AllocCompleted), timeout=30,
                         what="a2 run by the reconnected agent")
    finally:
        await writer.close()


async def _has(nc: Any, alloc_id: str, kind: type[AllocEvent]) -> bool:
    events = await EventStore(nc).load("alloc", NODE)
    return any(isinstance(e, kind) and e.alloc_id == alloc_id for _, e in events)


async def test_an_agent_stops_although_one_of_its_tasks_lost_its_cancel(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Python 3.11 ``wait_for`` loses a cancel that lands as what it waits for
    completes, and the loop around it runs on: the agent cancels again until it ends."""
    real = main.every

    async def losing(*args: Any, **kwargs: Any) -> None:
        try:
            await real(*args, **kwargs)
        except asyncio.CancelledError:
            pass   # the lost cancel: the loop goes on
        await real(*args, **kwargs)

    monkeypatch.setattr(main, "every", losing)
    agent = await fleet.start()
    started = time.monotonic()
    await fleet.stop(agent)   # fails after 20 s if the agent does not stop
    assert time.monotonic() - started < 5
