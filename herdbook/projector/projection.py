"""The projector runner: consumes HERD_EVENTS from checkpoint+1, folds into memory,
and commits batches with the checkpoint, in one transaction each.

- Catching up (until the stream's last sequence as of ``start`` is folded), it reads
  through ``BacklogReader`` and coalesces writes: a commit every ``catch_up_events``
  events or ``catch_up_interval``, whichever first, so a row that 200k events touch
  is written a few times, not once per 1,000-event batch. Live, it follows the stream
  with ``StreamFeed`` and commits every ``batch_size`` events or ``batch_interval``.
  The pull batch (what the reader asks the server for) is not the flush batch.
- ``wait_applied`` never waits for a window: the commit happens as soon as the event
  it waits for is folded. The exception is a rebuild from sequence 1: it goes into a
  fresh file with no journal and no fsyncs, committed once and renamed over the view at
  its end (``fresh_view``); a crash meanwhile leaves the old view and the rebuild restarts.

- A message that does not decode, or that its subject does not vouch for
  (``events.authority``), is counted, logged with subject and sequence (at most a line
  a second), and republished to ``herd.deadletter.HERD_EVENTS``; the runner goes on,
  and the node whose subject it is on still takes its sequence as its version.
- A fold that raises stops the runner at that event (``failed`` says which); it never
  skips silently.

The catch-up and live modes share the fold position, the dirty tables and the commit
lock, and the order of those three is the crash-safety argument, so they stay in this
one class; what does not share them lives beside it: the checks of a message and what a
refused one does (``binding``), read-your-writes (``waiters``), the collector while
catching up (``catch_up_gc``), the fresh file of a rebuild (``fresh_view``).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Coroutine
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.alloc import AllocEvent
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.backlog_reader import BacklogReader
from herdbook.events.codec import AnyEvent
from herdbook.events.deadletters import DeadLetters
from herdbook.events.eval_events import EvalEvent
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.instance import InstanceEvent
from herdbook.events.job_events import JobEvent
from herdbook.events.narrow_parser import Frames
from herdbook.events.node import NodeEvent
from herdbook.events.pool import PoolScaled
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector import integrity
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.binding import check_owner, skip_refused
from herdbook.projector.catch_up_gc import CatchUpGc
from herdbook.projector.eval_view import EvalView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.projector.rebase import rebase as rebase_versions
from herdbook.projector.tables import ReadModel, Table
from herdbook.projector.view_file import ViewFile
from herdbook.projector.waiters import Waiters

log = logging.getLogger(__name__)

PULL_BATCH = 5000
"""Messages asked of the server per pull request while catching up (at most twice that
ahead of the fold). The reader alone read 200k stored events at a median ~200k/s with
5,000 against ~140k/s with 2,000 (alternated, same server; 10,000 no better)."""

class ProjectorRunner(ViewFile):
    def __init__(self, nc: NATS, db_path: str, *, batch_size: int = 1000,
                 batch_interval: float = 0.05, stream: str = EVENTS_STREAM,
                 catch_up_events: int = 50_000, catch_up_interval: float = 1.0) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.db_path = db_path
        self.batch_size = batch_size
        self.batch_interval = batch_interval
        self.catch_up_events = max(batch_size, catch_up_events)
        self.catch_up_interval = max(batch_interval, catch_up_interval)
        self.live = True
        """False while reading the backlog (coalesced commits), True once caught up."""
        self._fresh = False
        """True while folding from sequence 1 into a fresh file (``fresh_view``): nothing is
        committed (``committed_seq`` stays 0) until it is renamed over the view at the end."""
        self._fresh_seq = 0          # last sequence written to the fresh file
        self.stream = stream
        self.model = ReadModel()
        self.folded_seq = 0          # last sequence folded into memory
        self.committed_seq = 0       # last sequence committed to SQLite
        self.dead_letters = DeadLetters(nc, stream, clock=time.monotonic, logger=log)
        self.failed: str | None = None
        self.gc = CatchUpGc()
        """The collector while this catches up, borrowed by the scheduler for its plans."""
        self._pending = 0
        self._db: Any = None
        self._sub: Any = None
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._waiters = Waiters()
        self._follower: asyncio.Task[None] | None = None

    @property
    def nodes(self) -> Table[NodeView, NodeEvent]:
        return self.model.nodes

    @property
    def allocs(self) -> Table[AllocView, AllocEvent]:
        return self.model.allocs

    @property
    def alloc_versions(self) -> Table[int, AllocEvent]:
        return self.model.alloc_versions

    @property
    def evals(self) -> Table[EvalView, EvalEvent]:
        return self.model.evals

    @property
    def jobs(self) -> Table[JobView, JobEvent]:
        return self.model.jobs

    @property
    def instances(self) -> Table[InstanceView, InstanceEvent]:
        return self.model.instances

    @property
    def pool_sizes(self) -> Table[int, PoolScaled]:
        return self.model.pool_sizes

    async def start(self) -> None:
        await self.load()
        await self._check_stream()
        info = await self.js.stream_info(self.stream)
        end = int(info.state.last_seq)
        self.live = end <= self.committed_seq
        if not self.live and self.committed_seq == 0:
            await self._open_fresh()
        self._flusher = asyncio.create_task(self._flush_loop(), name="projector-flush")
        if self.live:
            await self._follow_live()
        else:
            self._follower = asyncio.create_task(self._catch_up_then_follow(end),
                                                 name="projector-backlog")

    async def _catch_up_then_follow(self, end: int) -> None:
        started, first = time.monotonic(), self.folded_seq + 1
        # One catch_up_gc through the last commit: it encodes every row a rebuild folded,
        # and with the young generation collected every 700 allocations again that also
        # ran full collections of the heap (encoding 10k nodes' rows 72 ms against 35);
        # leaving it costs one collection (17 ms at 10k nodes), after the view is served.
        with self.gc.hold():
            try:
                if self.folded_seq < end:   # subject None: the whole stream (BacklogReader)
                    await BacklogReader(self.nc, self.stream, None, self.folded_seq + 1,
                                        end, self._take, batch=PULL_BATCH,
                                        on_batch=self._take_all).run()
            except Exception as err:  # noqa: BLE001 - a fold that failed is in self.failed
                if self.failed is not None:
                    return
                log.warning("reading the backlog of %s failed (%s); following it instead",
                            self.stream, err)
            else:
                took = time.monotonic() - started
                log.info("backlog of %s: sequences %d-%d folded in %.1fs (%.0f events/s)",
                         self.stream, first, self.folded_seq, took,
                         (self.folded_seq - first + 1) / max(took, 1e-6))
            self.live = True
            self.gc.refreeze()
            failing = await self._try_install(None)
        while failing is not None:   # a full disk: every second, one line until it works
            await asyncio.sleep(1.0)
            failing = await self._try_install(failing)
        self._kick.set()       # the last coalesced rows go out now, not in a second
        await self._follow_live()

    async def _follow_live(self) -> None:
        # The whole stream, no filter: through ``herd.>`` nats-server spent ~70-80 µs of CPU
        # per event on this consumer (750 nodes' subjects), without it ~15 (docs/performance.md).
        self._sub = StreamFeed(self.nc, self.stream, None, self.folded_seq + 1,
                               self._on_msg, batch=self.batch_size)
        await self._sub.start()

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)
            self._follower = None
        if self._sub is not None:
            await self._sub.stop()
            self._sub = None
        if self._flusher is not None:
            self._flusher.cancel()
            try:
                await self._flusher
            except asyncio.CancelledError:
                pass
            self._flusher = None
        async with self._lock:
            pass   # a shielded flush (or install) still writing finishes first
        if self._db is not None:
            if self._fresh:   # a view to what it folded: the next start goes on from there
                try:
                    await self._install(reopen=False)
                except (OSError, sqlite3.Error) as err:
                    log.error("the rebuilt view %s was not installed (%s): the next start "
                              "rebuilds it", self.db_path, err)
            elif self._pending:
                await self.flush()
        if self._db is not None:
            await self._db.close()
            self._db = None

    async def _on_msg(self, msg: Msg) -> None:
        more = self._take(msg.subject, msg.data, stream_seq(msg))
        if more is not None:
            await more
        if self._pending >= self.batch_size:
            await self.flush()

    def _take_all(self, frames: Frames, start: int = 0) -> Coroutine[Any, Any, None] | None:
        """Fold a run of stored messages (the backlog reader's ``on_batch``; ``_take`` is a
        run of one); returns the dead letter to send for one the subject does not vouch
        for, the rest of the run folded after it. The position moves and a commit is
        kicked once per run, not per message."""
        if self.failed is not None:
            return None   # stopped
        fold, folded, count, more = self.model.fold, self.folded_seq, 0, None
        try:
            for i in range(start, len(frames)):
                subject, seq, data = frames[i]
                if seq <= folded:
                    continue   # redelivered by a consumer reset
                try:
                    event = bind_event(text := subject.decode(), data)
                    if isinstance(event, AllocEvent):
                        check_owner(self.model, event)
                except Unvouched as err:
                    more = self._deadletter(Msg(self.nc, subject=text, data=bytes(data)), seq,
                                            str(err))
                    skip_refused(self.model, text, seq)
                else:
                    try:
                        fold(seq, event)
                    except Exception as err:
                        self.failed = f"fold failed at sequence {seq} ({text}): {err!r}"
                        log.error("projector stopped: %s", self.failed)
                        raise
                folded = seq
                count += 1
                if more is not None:
                    return self._take_after(more, frames, i + 1)
        finally:
            if count:
                self._advance(folded, count)
        return None

    async def _take_after(self, more: Coroutine[Any, Any, None], frames: Frames, start: int) -> None:
        await more
        rest = self._take_all(frames, start)
        if rest is not None:
            await rest

    def _take(self, subject: str, data: bytes, seq: int) -> Coroutine[Any, Any, None] | None:
        """Fold one stored message (``StreamFeed``'s path, and the reader's for a frame
        outside a run); as ``_take_all``."""
        return self._take_all([(subject.encode(), seq, data)])

    def _advance(self, seq: int, count: int) -> None:
        """``count`` more messages folded, up to ``seq``: kicks a commit when one is due."""
        self.folded_seq = seq
        self._pending += count
        if seq >= self._waiters.first or (not self.live and not self._fresh
                                         and self._pending >= self.catch_up_events):
            self._kick.set()

    def fold(self, seq: int, event: AnyEvent) -> None:
        self.model.fold(seq, event)

    def rebase(self, first_seq: int) -> None:
        """``stream`` was lost and created again from ``first_seq`` (``streams_guard``):
        every version below it is 0 from now on (``projector.rebase``), committed with the
        next batch, so the aggregates the lost events named can be decided on again."""
        if self.folded_seq >= first_seq:
            # Another replica created it again from what it knew, behind this view: the
            # new events at sequences up to ours would be taken for folded ones.
            log.error("%s was created again from sequence %d, but this view folded up to "
                      "%d: new events %d-%d will be missing from it; restart this replica "
                      "with its view moved aside (it restores the leader's newest view "
                      "snapshot, with view.snapshots on)", self.stream, first_seq,
                      self.folded_seq, first_seq, self.folded_seq)
        changed = rebase_versions(self.model, first_seq)
        if changed:
            self._pending += 1   # what makes the next flush commit the rebased rows
            self._kick.set()
            log.warning("%s was created again from sequence %d: the view keeps what it "
                        "folded before; %d versions from the lost history set to 0",
                        self.stream, first_seq, changed)

    async def recreated(self, first_seq: int, created: str) -> None:
        """``stream`` was created again (``streams_guard``), at ``created``: rebase, commit
        the rebased rows, then record the new stream as the view's. In that order: a view
        that records the new stream before its rows are rebased would not be rebased by
        the next start, and its snapshots would not match the stream they follow."""
        self.rebase(first_seq)
        await self.flush()
        async with self._lock:
            if self._db is not None and not self._fresh and created:
                await integrity.record_created(self._db, self.stream, created)

    @property
    def deadletters(self) -> int:
        return self.dead_letters.count

    async def _deadletter(self, msg: Msg, seq: int, reason: str) -> None:
        await self.dead_letters.send(msg, reason, seq)

    async def _flush_loop(self) -> None:
        failing: str | None = None
        while True:
            interval = self.batch_interval if self.live else self.catch_up_interval
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=interval)
            except TimeoutError:
                pass
            self._kick.clear()
            if self._fresh:
                continue   # a rebuild into a fresh file commits once, at its end (_install)
            try:
                # Shielded: stop() cancelling this loop must not cut a transaction in
                # half; stop() then waits for it on the lock and flushes the rest.
                await asyncio.shield(self.flush())
            except sqlite3.OperationalError as err:
                # A full disk: one line until it works again, not a traceback a second.
                if str(err) != failing:
                    failing = str(err)
                    log.error("projector flush failed, retrying every second: %s", err)
                await asyncio.sleep(1.0)
            except Exception:
                log.exception("projector flush failed")
                await asyncio.sleep(1.0)
            else:
                if failing is not None and self._pending == 0:
                    failing = None
                    log.warning("projector flush works again")

    async def catch_up(self, timeout: float = 30.0) -> None:
        """Return once the view has folded the stream up to its end as of now: what a
        reactor waits for before it decides (the one catch-up every part uses)."""
        info = await self.js.stream_info(self.stream)
        last = int(info.state.last_seq)
        # An empty stream's last_seq is first_seq - 1 (a stream the streams guard created
        # again after a loss starts after what was read): no message holds it, nothing
        # would ever fold it, and a wait for it would only time out.
        if last and info.state.messages:
            await self.wait_applied(last, timeout=timeout)

    async def wait_applied(self, seq: int, timeout: float = 10.0) -> None:
        """Return once the event at ``seq`` (and all before it) is committed to the view."""
        if seq <= self.committed_seq:
            return
        fut = self._waiters.add(seq)
        if seq <= self.folded_seq:
            self._kick.set()   # folded already: commit now; else _take kicks on reaching it
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            if not fut.done():
                fut.cancel()
                self._waiters.release(self.committed_seq)
