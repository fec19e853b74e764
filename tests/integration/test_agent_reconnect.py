"""An agent misses none of its allocation events across a reconnect, though it holds no
JetStream consumer: the real ``AllocationFollower`` on the agent's own connection
(``connect_until_reached``, which catches up on every reconnect), a real nats-server
stopped and started under it, and more events published while it is away than one
catch-up page holds. The executor is a recording fake (no processes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import nats
import pytest

from herdbook.agent.alloc_follow import AllocationFollower
from herdbook.agent.connection import connect_until_reached
from herdbook.control.agent_sync import BATCH, AgentSync
from herdbook.events.alloc import AllocPlaced, AllocStopRequested
from herdbook.events.store import EventStore
from herdbook.projector.alloc_view import AllocView
from tests.conftest import poll

NODE = "gpu-7"


class RecordingExecutor:
    """What the follower hands the executor, in order; runs until stopped."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, bool]] = []
        self.stopped = asyncio.Event()

    async def reattach(self) -> None:
        return None

    async def run(self) -> None:
        await self.stopped.wait()

    def apply(self, view: AllocView, stop: AllocStopRequested | None = None) -> None:
        self.applied.append((view.id, stop is not None))

    def pid_of(self, alloc_id: str) -> int | None:
        return 1   # running: the follower keeps every allocation it saw

    def placed(self) -> set[str]:
        return {alloc_id for alloc_id, stop in self.applied if not stop}


async def eventually(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    await poll(check, timeout, what)


async def stop_following(stop: asyncio.Event, executor: RecordingExecutor,
                         follower: AllocationFollower, following: asyncio.Task[None],
                         agent_nc: nats.NATS) -> None:
    """Stop the agent as it stops itself; the follower must end within 10 s."""
    stop.set()
    executor.stopped.set()
    follower.resync()
    await asyncio.wait_for(following, 10)
    await agent_nc.close()

async def ready_writer(url: str) -> nats.NATS:
    """A writer on the restarted server, once its JetStream has the events stream back."""
    writer = await nats.connect(url)
    deadline = time.monotonic() + 20
    while True:
        try:
            await writer.jetstream().stream_info("HERD_EVENTS")
            return writer
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


def placed(alloc_id: str, index: int = 0) -> AllocPlaced:
    return AllocPlaced(node_id=NODE, alloc_id=alloc_id, job_id="j", eval_id="e", index=index,
                       command=["true"])


@pytest.fixture
async def sync(nats_server, nc) -> AsyncIterator[None]:  # type: ignore[no-untyped-def]
    """The control plane's part: answers catch-ups, on a connection that reconnects."""
    control = await nats.connect(nats_server.url, max_reconnect_attempts=-1,
                                 reconnect_time_wait=0.2)
    answers = AgentSync(control)
    await answers.start()
    try:
        yield None
    finally:
        await answers.stop()
        await control.close()


async def test_events_published_while_the_agent_is_away_all_arrive_after_it_reconnects(
        nats_server, nc, sync: None) -> None:  # type: ignore[no-untyped-def]
    executor = RecordingExecutor()
    stop = asyncio.Event()
    follower = AllocationFollower(NODE, executor, stop,  # type: ignore[arg-type]
                                  resync_interval=3600.0)   # only a reconnect catches up
    agent_nc = await connect_until_reached(nats_server.url, None, f"herd-agent:{NODE}", stop,
                                           on_reconnect=follower.resync)
    following = asyncio.create_task(follower.follow(agent_nc))
    store = EventStore(nc)
    try:
        await store.append(placed("before"))
        await eventually(lambda: executor.placed() == {"before"}, "the first placement")

        await asyncio.to_thread(nats_server.stop)
        await asyncio.to_thread(nats_server.start)
        writer = await ready_writer(nats_server.url)
        try:
            away = EventStore(writer)
            # more than one catch-up page, and a stop of what it already runs
            ids = [f"away-{i:04d}" for i in range(BATCH + 20)]
            for i, alloc_id in enumerate(ids):
                await away.append(placed(alloc_id, i))
            await away.append(AllocStopRequested(node_id=NODE, alloc_id="before",
                                                 kill_timeout_s=5))
            assert not agent_nc.is_connected, "placed while the agent was away"
            last = (await writer.jetstream().stream_info("HERD_EVENTS")).state.last_seq
        finally:
            await writer.close()

        await eventually(lambda: executor.placed() == {"before", *ids} and
                         ("before", True) in executor.applied, "every event after reconnect")
        assert follower.seq == last
        assert [a for a, _ in executor.applied].count("before") == 2   # placed, then stopped
        assert len(executor.applied) == len(ids) + 2                    # nothing twice
    finally:
        await stop_following(stop, executor, follower, following, agent_nc)


async def test_an_event_published_during_the_reconnect_is_not_lost(
        nats_server, nc, sync: None) -> None:  # type: ignore[no-untyped-def]
    """Published as the agent comes back: either its core subscription sees it or the
    catch-up after the reconnect returns it; never neither."""
    executor = RecordingExecutor()
    stop = asyncio.Event()
    follower = AllocationFollower(NODE, executor, stop,  # type: ignore[arg-type]
                                  resync_interval=3600.0)
    agent_nc = await connect_until_reached(nats_server.url, None, f"herd-agent:{NODE}", stop,
                                           on_reconnect=follower.resync)
    following = asyncio.create_task(follower.follow(agent_nc))
    try:
        await asyncio.sleep(0.2)
        await asyncio.to_thread(nats_server.stop)
        await asyncio.to_thread(nats_server.start)
        writer = await ready_writer(nats_server.url)
        try:
            away = EventStore(writer)
            n = 0
            deadline = time.monotonic() + 15
            while not agent_nc.is_connected and time.monotonic() < deadline:
                await away.append(placed(f"r-{n:04d}", n))   # up to and across the reconnect
                n += 1
            for extra in range(5):                           # and just after it
                await away.append(placed(f"r-{n + extra:04d}", n + extra))
            n += 5
        finally:
            await writer.close()
        await eventually(lambda: len(executor.placed()) == n, f"all {n} placements")
        assert executor.placed() == {f"r-{i:04d}" for i in range(n)}
    finally:
        await stop_following(stop, executor, follower, following, agent_nc)


async def test_a_stopping_agent_does_not_sit_out_the_catch_up_backoff(
        nats_server, nc) -> None:  # type: ignore[no-untyped-def]
    """No control plane answers, so the follower backs off (0.5, 1, 2, 4 s ...); a stop
    during a long backoff ends it at once instead of after the sleep (a test stopping an
    agent mid-backoff once waited ~10 s under load)."""
    executor = RecordingExecutor()
    stop = asyncio.Event()
    follower = AllocationFollower(NODE, executor, stop,  # type: ignore[arg-type]
                                  resync_interval=3600.0)
    following = asyncio.create_task(follower.follow(nc))  # type: ignore[arg-type]
    await asyncio.sleep(1.7)          # asked thrice: now in the 2 s backoff
    started = time.monotonic()
    stop.set()
    executor.stopped.set()
    await asyncio.wait_for(following, 5)
    assert time.monotonic() - started < 1.0
