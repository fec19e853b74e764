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

Longer than the ~300 lines a module should be: the catch-up and live modes share the
fold position, the dirty tables and the commit lock, and the order of those three is
the crash-safety argument; kept in one place so it can be read in one place.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

from msgspec.structs import replace
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.alloc import AllocEvent
from herdbook.events.authority import Unvouched, bind_event, family_of
from herdbook.events.backlog_reader import BacklogReader, Frames
from herdbook.events.codec import AnyEvent
from herdbook.events.deadletters import DeadLetters
from herdbook.events.eval_events import EvalEvent
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.instance import InstanceEvent
from herdbook.events.jobs import JobEvent
from herdbook.events.node import NodeEvent
from herdbook.events.pool import PoolScaled
from herdbook.events.subjects import (
    EVENTS_STREAM,
    ID_PATTERN,
    node_id_of_subject,
)
from herdbook.projector import fresh_view, integrity, schema
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.projector.rebase import rebase as rebase_versions
from herdbook.projector.tables import ReadModel, Table

log = logging.getLogger(__name__)

PULL_BATCH = 5000
"""Messages asked of the server per pull request while catching up (at most twice that
ahead of the fold). The reader alone read 200k stored events at a median ~200k/s with
5,000 against ~140k/s with 2,000 (alternated, same server; 10,000 no better)."""

CATCH_UP_GC_GEN0 = 50_000
"""Python's young-generation GC threshold while catching up (700 by default): a fold
makes and drops a few tracked objects per event, and collecting them every 700 was
8-11 % of a rebuild (and of its limit). Restored once caught up."""

_gc_holders = 0
_gc_saved: tuple[int, ...] = ()
_gc_frozen = False


@contextmanager
def catch_up_gc() -> Iterator[None]:
    """Inside: young objects collected every ``CATCH_UP_GC_GEN0`` allocations, not every
    700, and the heap found on entering frozen (``gc.freeze``: a full collection does
    not walk it; 125-175 ms each at 10,000 nodes, several in a large plan). Holders may
    overlap (a catch-up, plans): the first one in freezes and unfreezes when it leaves,
    so the heap is frozen at most as long as one holder runs, never for as long as
    holders keep overlapping; the thresholds come back once the last one leaves. The
    benchmark's limit (decode + fold in memory) runs inside it too."""
    global _gc_holders, _gc_saved, _gc_frozen
    if _gc_holders == 0:
        _gc_saved = gc.get_threshold()
        gc.set_threshold(max(CATCH_UP_GC_GEN0, _gc_saved[0]), *_gc_saved[1:])
    froze = not _gc_frozen
    if froze:
        gc.freeze()
        _gc_frozen = True
    _gc_holders += 1
    try:
        yield
    finally:
        _gc_holders -= 1
        if froze:
            gc.unfreeze()
            _gc_frozen = False
        if _gc_holders == 0:
            gc.set_threshold(*_gc_saved)


def refreeze() -> None:
    """Inside ``catch_up_gc``: freeze what was made since entering it too (a rebuild's
    view), so that the collections while its last commit encodes every row walk only
    the young objects (10k nodes' rows: 35 ms, against ~50 without); ``catch_up_gc``
    unfreezes it with the rest when its holder leaves."""
    if _gc_frozen:
        gc.freeze()


class ProjectorRunner:
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
        self._pending = 0
        self._db: Any = None
        self._sub: Any = None
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._first_waiter = float("inf")    # the lowest sequence someone waits for
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
        with catch_up_gc():
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
            refreeze()
            failing = await self._try_install(None)
        while failing is not None:   # a full disk: every second, one line until it works
            await asyncio.sleep(1.0)
            failing = await self._try_install(failing)
        self._kick.set()       # the last coalesced rows go out now, not in a second
        await self._follow_live()

    async def _try_install(self, failing: str | None) -> str | None:
        """One try at installing a rebuilt view (``_install``), if there is one or no view
        is open: None once done, else its error (logged unless it is ``failing``)."""
        if not (self._fresh or self._db is None):
            return None
        try:
            await asyncio.shield(self._install())
        except (OSError, sqlite3.Error) as err:
            if str(err) != failing:
                log.error("installing the rebuilt view %s failed, retrying every second: %s",
                          self.db_path, err)
            return str(err)
        return None

    async def _open_fresh(self) -> None:
        await self._close_db()
        try:
            self._db = await fresh_view.open_fresh(self.db_path)
            await integrity.disagreement(self.js, self.stream, self._db, 0)  # the stream's identity
        except (OSError, sqlite3.Error) as err:
            await self._close_db()
            log.warning("cannot rebuild the view %s in a fresh file (%s): rebuilding it in place",
                        self.db_path, err)
            self._db = await schema.open_db(self.db_path)
            return
        self._fresh = True

    async def _install(self, *, reopen: bool = True) -> None:
        """Commit what is folded and rename the fresh file over the view (``fresh_view``);
        with ``reopen``, go on in it. Safe to call again after it raised: a file not yet
        renamed is opened again as it was, a view renamed but not opened is opened."""
        async with self._lock:
            if self._fresh and self._db is not None:
                await self._commit()
                db, self._db = self._db, None
                try:
                    await fresh_view.install(db, self.db_path)
                except BaseException:
                    self._db = await fresh_view.open_fresh(self.db_path, empty=False)
                    raise
                self._fresh = False
                if self._fresh_seq:   # the view at db_path holds it now
                    self.committed_seq, self._fresh_seq = self._fresh_seq, 0
                    self._release_waiters()
            if reopen and not self._fresh and self._db is None:
                self._db = await schema.open_db(self.db_path)

    async def _follow_live(self) -> None:
        # The whole stream, no filter: through ``herd.>`` nats-server spent ~70-80 µs of CPU
        # per event on this consumer (750 nodes' subjects), without it ~15 (docs/performance.md).
        self._sub = StreamFeed(self.nc, self.stream, None, self.folded_seq + 1,
                               self._on_msg, batch=self.batch_size)
        await self._sub.start()

    async def load(self) -> None:
        """Open the view database and load every table and the checkpoint. A file that
        cannot be read is moved aside and the view starts empty (``start`` folds it
        again from sequence 1), with one log line saying why: never a crash."""
        try:
            await self._load()
        except integrity.CORRUPT_ERRORS as err:
            await self._close_db()
            await self._start_over(integrity.corrupt_reason(self.db_path, err), "corrupt")

    async def _check_stream(self) -> None:
        """A view that is not a view of the stream there now (``integrity``) starts over
        too: never a view that silently skips new events. One of a stream created again
        after a loss (``first_seq`` after what the view folded) is kept, rebased."""
        why = await integrity.disagreement(self.js, self.stream, self._db, self.committed_seq,
                                           on_continued=self.rebase)
        if why is not None:
            await self._close_db()
            await self._start_over(why, "stale")
            await integrity.disagreement(self.js, self.stream, self._db, self.committed_seq)

    async def _start_over(self, why: str, kind: str) -> None:
        try:
            aside = integrity.move_aside(self.db_path, kind)
        except OSError as err:
            raise integrity.ViewError(f"the view {self.db_path} {why}, and it cannot be moved "
                                      f"aside: {err.strerror or err}") from err
        log.error("view %s %s: moved it to %s and rebuilding it from sequence 1",
                  self.db_path, why, aside.name)
        await self._load()

    async def _load(self) -> None:
        self._db = await schema.open_db(self.db_path)
        nodes, self.committed_seq = await schema.load(self._db, self.stream)
        self.model.nodes.load(nodes)
        for table in (self.model.instances, self.model.evals, self.model.jobs,
                      self.model.allocs, self.model.alloc_versions):
            table.load(await schema.load_table(self._db, table.name,
                                               schema.DECODERS[table.name]))
        self.model.pool_sizes.load(await schema.load_pool_sizes(self._db))
        self.folded_seq = self.committed_seq

    async def _close_db(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

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
                        self._check_owner(event)
                except Unvouched as err:
                    more = self._deadletter(Msg(self.nc, subject=text, data=bytes(data)), seq,
                                            str(err))
                    self._skip(text, seq)
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
        if seq >= self._first_waiter or (not self.live and not self._fresh
                                         and self._pending >= self.catch_up_events):
            self._kick.set()

    def fold(self, seq: int, event: AnyEvent) -> None:
        self.model.fold(seq, event)

    def _check_owner(self, event: AnyEvent) -> None:
        """An allocation event counts only on the subjects of the node the allocation
        was placed on: n1's agent may not report on n2's allocation by its id."""
        if isinstance(event, AllocEvent):
            placed = self.model.allocs.get(event.alloc_id)
            if placed is not None and placed.node_id != event.node_id:
                raise Unvouched(f"allocation {event.alloc_id} is on node {placed.node_id}, "
                              f"not {event.node_id}")

    def _skip(self, subject: str, seq: int) -> None:
        """A refused message still moves the version of the node whose subject it is on:
        a version is the subject's last stored sequence whatever the body, so one bad
        message never wedges a node's conditional appends (DESIGN §9)."""
        family = family_of(subject)
        if family is None or family.prefix not in ("node", "alloc"):
            return
        node_id = node_id_of_subject(subject)
        if not ID_PATTERN.fullmatch(node_id):
            return
        if family.prefix == "alloc":
            self.model.alloc_versions.put(node_id, seq)
            return
        view = self.model.nodes.get(node_id)
        if view is not None:
            self.model.nodes.put(node_id, replace(view, version=seq))

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

    async def flush(self) -> None:
        async with self._lock:
            await self._commit()

    async def _commit(self) -> None:
        """What ``flush`` does, under its lock."""
        if self._pending == 0 or self._db is None:
            return
        seq = self.folded_seq
        self._pending = 0
        model = self.model
        tables = [(table, table.take_dirty()) for table in model.tables()]
        (_, nodes_changed), *others, (_, pools_changed) = tables
        try:
            await schema.write_batch(
                self._db, self.stream, model.nodes.rows, nodes_changed, seq,
                [(table.name, table.rows, dirty) for table, dirty in others],
                dict(model.pool_sizes.rows) if pools_changed else None)
        except BaseException:
            # Nothing was committed: the next flush writes these rows again.
            for table, dirty in tables:
                table.mark_dirty(dirty)
            self._pending += max(1, seq - self.committed_seq)
            raise
        if self._fresh:   # committed once the fresh file is the view (_install)
            self._fresh_seq = seq
            return
        self.committed_seq = seq
        self._release_waiters()

    def _release_waiters(self) -> None:
        keep = []
        for seq, fut in self._waiters:
            if seq <= self.committed_seq:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((seq, fut))
        self._waiters = keep
        self._first_waiter = min((seq for seq, _ in keep), default=float("inf"))

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
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        self._first_waiter = min(self._first_waiter, seq)
        if seq <= self.folded_seq:
            self._kick.set()   # folded already: commit now; else _take kicks on reaching it
        try:
            await asyncio.wait_for(fut, timeout)
        finally:
            if not fut.done():
                fut.cancel()
                self._release_waiters()
