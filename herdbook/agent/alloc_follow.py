"""How the agent follows its node's allocations without any JetStream consumer.

A core subscription to ``herd.alloc.<node>.>`` says something happened, and a catch-up
read through the control plane (``herd.sync.<node>.allocs``) returns, in stream order,
every event not folded yet. It runs at start, after every event, after every reconnect
and every ``resync_interval``, so nothing published while disconnected is missed. The
executor sees every changed view once per catch-up (with the stop request just folded,
if any)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from herdbook.agent.executor import Executor
from herdbook.backoff import Backoff
from herdbook.events.alloc import AllocEvent, AllocStopRequested
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.codec import encode
from herdbook.events.subjects import aggregate_filter, printable, sync_subject
from herdbook.events.sync import SyncedEvent, SyncRequest, sync_reply_decoder
from herdbook.projector.alloc_view import AllocView, apply_alloc

log = logging.getLogger(__name__)

CATCH_UP_RETRY = Backoff(0.5, cap=10.0)
"""No control plane answers the catch-up yet: asked again after 0.5 s, 1, 2 ... 10 s."""
MAX_AWAITING = 10_000
AWAIT_LIMIT = 10.0
"""Seconds an event seen live may stay missing from the catch-up reads before the
agent stops looking for it (the periodic catch-up would still find it)."""


class _EventId(msgspec.Struct):
    event_id: str = ""


_event_id_decoder = msgspec.json.Decoder(_EventId)


class AllocationFollower:
    """This node's allocations, folded from the stream and handed to the executor."""

    def __init__(self, node_id: str, executor: Executor, stop: asyncio.Event,
                 resync_interval: float) -> None:
        self.node_id = node_id
        self.executor = executor
        self._stop = stop
        self.resync_interval = resync_interval
        self.allocs: dict[str, AllocView] = {}
        """This node's allocations, folded from the stream."""
        self.seq = 0
        self._resync = asyncio.Event()
        self._resync.set()
        self._awaiting: dict[str, float] = {}
        """Ids of events seen on the core subscription that no catch-up returned yet."""

    def resync(self) -> None:
        """Catch up soon (a reconnect: events may have been missed)."""
        self._resync.set()

    async def follow(self, nc: NATS) -> None:
        """Reattach to the workloads a previous agent left, then follow until the
        executor stops."""
        await self.executor.reattach()
        watcher = asyncio.create_task(self.executor.run(), name="executor")
        sub = None
        try:
            sub = await nc.subscribe(aggregate_filter("alloc", self.node_id),
                                     cb=self._on_alloc_event)
            while not watcher.done():
                if self._awaiting:
                    self._resync.set()
                # Wake on a poke, on the interval, or when the executor ends: a stop that
                # sets the executor's end and pokes once must not find the poke cleared
                # below before the executor's task has run, and then wait a whole interval.
                poked = asyncio.ensure_future(self._resync.wait())
                try:
                    await asyncio.wait([poked, watcher], timeout=self.resync_interval,
                                       return_when=asyncio.FIRST_COMPLETED)
                finally:
                    poked.cancel()
                if watcher.done():
                    break
                self._resync.clear()
                await self._catch_up(nc)
                if self._awaiting:
                    # Poked by an event the stream did not show yet: look again shortly.
                    await asyncio.sleep(0.05)
            await watcher
        finally:
            watcher.cancel()
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass

    async def _on_alloc_event(self, msg: Any) -> None:
        """An event on one of this node's allocation subjects: catch up. Its id is kept
        until a catch-up returns it (the core delivery may overtake the stream's store)."""
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        if len(self._awaiting) < MAX_AWAITING:
            self._awaiting[event.event_id] = time.monotonic()
        self._resync.set()

    async def _catch_up(self, nc: NATS) -> None:
        """Fold every allocation event after ``seq``, page by page, then hand each
        changed view to the executor. Asks again (backing off) until a control plane
        answers."""
        stops: dict[str, AllocStopRequested] = {}
        changed: dict[str, AllocView] = {}
        delays = CATCH_UP_RETRY.delays()
        delay = next(delays)
        while not self._stop.is_set():
            try:
                msg = await nc.request(sync_subject(self.node_id),
                                       encode(SyncRequest(after=self.seq)), timeout=5.0)
                reply = sync_reply_decoder.decode(msg.data)
                if reply.error:
                    raise RuntimeError(reply.error)
            except Exception as err:  # noqa: BLE001 - no control plane yet: wait and ask again
                log.warning("cannot catch up on allocations (%s); asking again in %.1fs",
                            printable(str(err) or type(err).__name__), delay)
                # A stopping agent does not sit out the backoff. Not wait_for: on 3.11 it
                # swallows a cancel that lands as the stop is set (the agent does both).
                stopping = asyncio.ensure_future(self._stop.wait())
                try:
                    await asyncio.wait([stopping], timeout=delay)
                finally:
                    stopping.cancel()
                delay = next(delays)
                continue
            for synced in reply.events:
                self._awaiting.pop(_event_id_of(synced), None)
                try:
                    event = bind_event(synced.subject, bytes(synced.data))
                except Unvouched as err:
                    log.warning("skipping %s: %s", printable(synced.subject, 120), err)
                    continue
                if isinstance(event, AllocEvent):
                    view = self._fold(synced.seq, event)
                    if view is not None:
                        changed[view.id] = view
                        if isinstance(event, AllocStopRequested):
                            stops[view.id] = event
            self.seq = max(self.seq, reply.last)
            if not reply.more:
                break
        now = time.monotonic()
        for event_id, since in list(self._awaiting.items()):
            if now - since > AWAIT_LIMIT:
                del self._awaiting[event_id]   # not ours to wait for any longer
        for view in changed.values():
            current = self.allocs.get(view.id)
            if current is not None:
                self._apply(current, stops.get(view.id))

    def _fold(self, seq: int, event: AllocEvent) -> AllocView | None:
        """Fold one event into ``allocs``; None if it was seen already or concerns an
        allocation already settled and forgotten."""
        if seq <= self.seq:
            return None
        self.seq = seq
        view = apply_alloc(self.allocs.get(event.alloc_id), event, seq)
        if view is not None:
            self.allocs[event.alloc_id] = view
        return view

    def _apply(self, view: AllocView, stop: AllocStopRequested | None) -> None:
        self.executor.apply(view, stop)
        if view.terminal and self.executor.pid_of(view.id) is None:
            # Settled here: nothing more to do for it (the executor remembers its id, so a
            # late duplicate placement starts nothing). Keeps a long-lived agent small.
            del self.allocs[view.id]


def _event_id_of(synced: SyncedEvent) -> str:
    try:
        return str(_event_id_decoder.decode(bytes(synced.data)).event_id)
    except msgspec.DecodeError:
        return ""
