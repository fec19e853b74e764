"""The projector runner: consumes HERD_EVENTS from checkpoint+1, folds into memory,
and commits batches (``batch_size`` events or ``batch_interval``) with the checkpoint.

- A message that does not decode, or that its subject does not vouch for
  (``events.authority``), is counted, logged with subject and sequence (at most a line
  a second), and republished to ``herd.deadletter.HERD_EVENTS``; the runner goes on,
  and the node whose subject it is on still takes its sequence as its version.
- A fold that raises stops the runner at that event (``failed`` says which); it never
  skips silently.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from msgspec.structs import replace
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.alloc import AllocEvent
from herdbook.events.authority import Unvouched, bind_event, family_of
from herdbook.events.codec import AnyEvent
from herdbook.events.deadletters import DeadLetters
from herdbook.events.eval_events import EvalEvent
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.instance import InstanceEvent
from herdbook.events.jobs import JobEvent
from herdbook.events.pool import PoolScaled
from herdbook.events.subjects import (
    EVENTS_STREAM,
    ID_PATTERN,
    node_id_of_subject,
)
from herdbook.projector import integrity, schema
from herdbook.projector.alloc_view import AllocView, apply_alloc
from herdbook.projector.eval_view import EvalView, apply_eval
from herdbook.projector.instance_view import InstanceView, apply_instance
from herdbook.projector.job_view import JobView, apply_job
from herdbook.projector.node_view import NodeView, apply

log = logging.getLogger(__name__)

ChangeListener = Callable[[str, NodeView | None, AnyEvent], None]
InstanceListener = Callable[[str, InstanceView | None, InstanceEvent], None]
AllocListener = Callable[[AllocView | None, AllocEvent], None]
EvalListener = Callable[[str, EvalView | None, AnyEvent], None]


class ProjectorRunner:
    def __init__(self, nc: NATS, db_path: str, *, batch_size: int = 1000,
                 batch_interval: float = 0.05, stream: str = EVENTS_STREAM) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.db_path = db_path
        self.batch_size = batch_size
        self.batch_interval = batch_interval
        self.stream = stream
        self.views: dict[str, NodeView] = {}
        self.instances: dict[str, InstanceView] = {}
        self.pool_sizes: dict[str, int] = {}
        self.evals: dict[str, EvalView] = {}
        self.jobs: dict[str, JobView] = {}
        self.allocs: dict[str, AllocView] = {}
        self.alloc_versions: dict[str, int] = {}
        """The last sequence of each node's allocation aggregate (``herd.alloc.<node>.>``)
        folded here: the expected version of a plan decided from this view."""
        self._dirty_allocs: set[str] = set()
        self._dirty_alloc_nodes: set[str] = set()
        self.alloc_listeners: list[AllocListener] = []
        self.eval_listeners: list[EvalListener] = []
        self._dirty_jobs: set[str] = set()
        self._dirty_evals: set[str] = set()
        self._dirty_pools = False
        self.instance_listeners: list[InstanceListener] = []
        self.folded_seq = 0          # last sequence folded into memory
        self.committed_seq = 0       # last sequence committed to SQLite
        self.dead_letters = DeadLetters(nc, stream, logger=log)
        self.failed: str | None = None
        self.listeners: list[ChangeListener] = []
        self._dirty: set[str] = set()
        self._dirty_instances: set[str] = set()
        self._pending = 0
        self._db: Any = None
        self._sub: Any = None
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    async def start(self) -> None:
        await self.load()
        await self._check_stream()
        self._flusher = asyncio.create_task(self._flush_loop(), name="projector-flush")
        self._sub = StreamFeed(self.nc, self.stream, "herd.>", self.committed_seq + 1,
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
        too: never a view that silently skips new events."""
        why = await integrity.disagreement(self.js, self.stream, self._db, self.committed_seq)
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
        self.views, self.committed_seq = await schema.load(self._db, self.stream)
        self.instances = await schema.load_table(self._db, "instances",
                                                 schema.DECODERS["instances"])
        self.evals = await schema.load_table(self._db, "evals", schema.DECODERS["evals"])
        self.jobs = await schema.load_table(self._db, "jobs", schema.DECODERS["jobs"])
        self.allocs = await schema.load_table(self._db, "allocs", schema.DECODERS["allocs"])
        self.alloc_versions = await schema.load_table(self._db, "alloc_versions",
                                                      schema.DECODERS["alloc_versions"])
        self.pool_sizes = await schema.load_pool_sizes(self._db)
        self.folded_seq = self.committed_seq

    async def _close_db(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            await db.close()

    async def stop(self) -> None:
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
        if self._db is not None:
            async with self._lock:
                pass   # a shielded flush still writing finishes first
            if self._pending:
                await self.flush()
            await self._db.close()
            self._db = None

    async def _on_msg(self, msg: Msg) -> None:
        if self.failed is not None:
            return
        seq = stream_seq(msg)
        if seq <= self.folded_seq:
            return  # redelivered by an ordered-consumer reset
        try:
            event = bind_event(msg.subject, msg.data)
            self._check_owner(event)
        except Unvouched as err:
            await self._deadletter(msg, seq, str(err))
            self._skip(msg.subject, seq)
        else:
            try:
                self.fold(seq, event)
            except Exception as err:
                self.failed = f"fold failed at sequence {seq} ({msg.subject}): {err!r}"
                log.error("projector stopped: %s", self.failed)
                raise
        self.folded_seq = seq
        self._pending += 1
        if self._pending >= self.batch_size:
            await self.flush()

    def fold(self, seq: int, event: AnyEvent) -> None:
        if isinstance(event, InstanceEvent):
            self._fold_instance(seq, event)
            return
        if isinstance(event, AllocEvent):
            new_alloc = apply_alloc(self.allocs.get(event.alloc_id), event, seq)
            self._fold_other(self.allocs, self._dirty_allocs, event.alloc_id, new_alloc)
            self.alloc_versions[event.node_id] = seq
            self._dirty_alloc_nodes.add(event.node_id)
            for alloc_listener in self.alloc_listeners:
                alloc_listener(new_alloc, event)
            return
        if isinstance(event, EvalEvent):
            new_eval = apply_eval(self.evals.get(event.eval_id), event, seq)
            self._fold_other(self.evals, self._dirty_evals, event.eval_id, new_eval)
            for eval_listener in self.eval_listeners:
                eval_listener(event.eval_id, new_eval, event)
            return
        if isinstance(event, JobEvent):
            new_job = apply_job(self.jobs.get(event.job_id), event, seq)
            self._fold_other(self.jobs, self._dirty_jobs, event.job_id, new_job)
            for eval_listener in self.eval_listeners:
                eval_listener(event.job_id, None, event)
            return
        if isinstance(event, PoolScaled):
            self.pool_sizes[event.pool] = event.size
            self._dirty_pools = True
            return
        node_id = event.node_id
        new = apply(self.views.get(node_id), event, seq)
        if new is None:
            self.views.pop(node_id, None)
        else:
            self.views[node_id] = new
        self._dirty.add(node_id)
        for listener in self.listeners:
            listener(node_id, new, event)

    @staticmethod
    def _fold_other(views: dict[str, Any], dirty: set[str], key: str, new: Any) -> None:
        if new is None:
            views.pop(key, None)
        else:
            views[key] = new
        dirty.add(key)

    def _fold_instance(self, seq: int, event: InstanceEvent) -> None:
        instance_id = event.instance_id
        new = apply_instance(self.instances.get(instance_id), event, seq)
        self._fold_other(self.instances, self._dirty_instances, instance_id, new)
        for listener in self.instance_listeners:
            listener(instance_id, new, event)

    def _check_owner(self, event: AnyEvent) -> None:
        """An allocation event counts only on the subjects of the node the allocation
        was placed on: n1's agent may not report on n2's allocation by its id."""
        if isinstance(event, AllocEvent):
            placed = self.allocs.get(event.alloc_id)
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
            self.alloc_versions[node_id] = seq
            self._dirty_alloc_nodes.add(node_id)
            return
        view = self.views.get(node_id)
        if view is not None:
            self.views[node_id] = replace(view, version=seq)
            self._dirty.add(node_id)

    @property
    def deadletters(self) -> int:
        return self.dead_letters.count

    async def _deadletter(self, msg: Msg, seq: int, reason: str) -> None:
        await self.dead_letters.send(msg, reason, seq)

    async def flush(self) -> None:
        async with self._lock:
            if self._pending == 0 or self._db is None:
                return
            seq = self.folded_seq
            dirty, self._dirty = self._dirty, set()
            dirty_instances, self._dirty_instances = self._dirty_instances, set()
            self._pending = 0
            pools = self.pool_sizes if self._dirty_pools else None
            dirty_evals, self._dirty_evals = self._dirty_evals, set()
            dirty_jobs, self._dirty_jobs = self._dirty_jobs, set()
            dirty_allocs, self._dirty_allocs = self._dirty_allocs, set()
            dirty_alloc_nodes, self._dirty_alloc_nodes = self._dirty_alloc_nodes, set()
            self._dirty_pools = False
            try:
                await schema.write_batch(
                    self._db, self.stream, self.views, dirty, seq,
                    [("instances", self.instances, dirty_instances),
                     ("evals", self.evals, dirty_evals), ("jobs", self.jobs, dirty_jobs),
                     ("allocs", self.allocs, dirty_allocs),
                     ("alloc_versions", self.alloc_versions, dirty_alloc_nodes)],
                    pools)
            except BaseException:
                # Nothing was committed: the next flush writes these rows again.
                self._dirty |= dirty
                self._dirty_instances |= dirty_instances
                self._dirty_evals |= dirty_evals
                self._dirty_jobs |= dirty_jobs
                self._dirty_allocs |= dirty_allocs
                self._dirty_alloc_nodes |= dirty_alloc_nodes
                self._dirty_pools = self._dirty_pools or pools is not None
                self._pending += max(1, seq - self.committed_seq)
                raise
            self.committed_seq = seq
            self._release_waiters()

    def _release_waiters(self) -> None:
        keep = []
        for seq, fut in self._waiters:
            if seq <= self.committed_seq:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self._waiters = keep

    async def _flush_loop(self) -> None:
        failing: str | None = None
        while True:
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=self.batch_interval)
            except TimeoutError:
                pass
            self._kick.clear()
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
        if last:
            await self.wait_applied(last, timeout=timeout)

    async def wait_applied(self, seq: int, timeout: float = 10.0) -> None:
        """Return once the event at ``seq`` (and all before it) is committed to the view."""
        if seq <= self.committed_seq:
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, fut))
        self._kick.set()
        await asyncio.wait_for(fut, timeout)
