"""Node and allocation events drive evaluations (Lattice's allocation handling).

- A node DOWN, disabled, deleted or terminated: its live allocations are LOST, and each
  affected job gets a node-update eval; the scheduler requeues them by the job's policy.
  Allocations on a sensitive node are lost with ``requeue_allowed=False``: never
  requeued automatically (an operator decides).
- A drain: every live allocation on the node gets a stop request with ``migrate`` (the
  scheduler places its replacement elsewhere at once) and each job a node-drain eval.
  ``--urgent`` first sends the checkpoint signal (``allocations.checkpoint_signal``,
  SIGUSR1) and waits ``checkpoint_grace`` before stopping; at the drain's ``--deadline``
  whatever still runs is killed (``force``). DRAINING → DRAINED follows when the node's
  heartbeat reports no running allocation.
- A workload the agent reports failed, or lost, gets an alloc-failure eval for its job.
- Capacity appears (a node becomes schedulable, its inventory changes, an allocation
  ends): the blocked evals are unblocked (after ``unblock_delay``, to batch bursts).
- Eval GC: complete, failed and canceled evals older than ``eval_gc_threshold`` are
  deleted from the view (the log keeps them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec.structs import replace

from herdbook.config import Config
from herdbook.events.alloc import (
    LIVE,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocStatus,
    AllocStopRequested,
)
from herdbook.events.codec import AnyEvent
from herdbook.events.evals import EvalStatus, Step
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.node import (
    NodeDeleted,
    NodeDisabled,
    NodeDown,
    NodeDrainStarted,
    NodeEvent,
    NodeInfoUpdated,
    NodeTerminated,
)
from herdbook.events.states import Intent, Lifecycle, NodeClass
from herdbook.events.store import ConflictError, EventStore
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import step
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.scheduler import new_eval

log = logging.getLogger(__name__)

ACTOR = "allocations"
LOSING = (NodeDown, NodeDisabled, NodeDeleted, NodeTerminated)
GC_STATUSES = frozenset({EvalStatus.COMPLETE, EvalStatus.FAILED, EvalStatus.CANCELED})


class AllocationReactor:
    def __init__(self, store: EventStore, projector: ProjectorRunner, config: Config, *,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.store = store
        self._unsubscribe: list[Callable[[], None]] = []
        self.projector = projector
        self.config = config
        self.now = now
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._schedulable: dict[str, bool] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._unblock_pending = False
        self._deadlines: dict[str, asyncio.TimerHandle] = {}

    def start(self) -> None:
        self._schedulable = {n.id: n.schedulable for n in self.projector.nodes.values()}
        self._unsubscribe = [self.projector.nodes.subscribe(self._on_node),
                             self.projector.allocs.subscribe(self._on_alloc)]
        self._tasks = [asyncio.create_task(self._work(), name="allocations"),
                       asyncio.create_task(self._gc_loop(), name="eval-gc")]
        # Work a restart may have missed: lost allocations on nodes already gone, and
        # blocked evals that capacity may fit now.
        for node in self.projector.nodes.values():
            if node.lifecycle is Lifecycle.DOWN or node.intent is Intent.DISABLED:
                self._queue.put_nowait(("lost", (node.id, "node is down", None)))
        self.request_unblock()

    async def stop(self) -> None:
        for handle in self._deadlines.values():
            handle.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    # -------------------------------------------------------------- listeners (sync)
    def _on_node(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        if isinstance(event, LOSING):
            self._queue.put_nowait(("lost", (node_id, f"node {event.event_name}: "
                                              f"{getattr(event, 'reason', '')}".rstrip(": "),
                                             event.event_id)))
        elif isinstance(event, NodeDrainStarted):
            self._queue.put_nowait(("drain", (node_id, event.urgent, event.deadline_s,
                                              event.event_id)))
        now = view is not None and view.schedulable
        before = self._schedulable.get(node_id, False)
        self._schedulable[node_id] = now
        if now and (not before or isinstance(event, NodeInfoUpdated)):
            self.request_unblock()

    def _on_alloc(self, alloc_id: str, view: AllocView | None, event: AllocEvent) -> None:
        if view is None:
            return
        if isinstance(event, AllocFailed | AllocLost) and event.actor.startswith("agent:"):
            self._queue.put_nowait(("alloc-failure", (view.job_id, event)))
        if view.terminal:
            self.request_unblock()

    def request_unblock(self) -> None:
        if not self._unblock_pending:
            self._unblock_pending = True
            self._queue.put_nowait(("unblock", None))

    # -------------------------------------------------------------- the work
    async def _work(self) -> None:
        while True:
            kind, arg = await self._queue.get()
            try:
                await self._catch_up()
                if kind == "lost":
                    await self.lose_allocations(*arg)
                elif kind == "drain":
                    await self.drain(*arg)
                elif kind == "alloc-failure":
                    await self._eval_for(arg[0], Trigger.ALLOC_FAILURE, causation=arg[1])
                elif kind == "unblock":
                    await asyncio.sleep(float(self.config.scheduler.unblock_delay))
                    self._unblock_pending = False
                    await self._catch_up()
                    await self.unblock()
                elif kind == "deadline":
                    await self.drain_deadline(arg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("allocation reactor: %s %s failed; retrying in 1s", kind, arg)
                await asyncio.sleep(1.0)
                self._queue.put_nowait((kind, arg))

    async def _catch_up(self) -> None:
        await self.projector.catch_up()

    def _live_on(self, node_id: str) -> list[AllocView]:
        return sorted((a for a in self.projector.allocs.values()
                       if a.node_id == node_id and a.status in LIVE), key=lambda a: a.id)

    async def _append_node_allocs(self, node_id: str,
                                  decide: Callable[[], list[AllocEvent]]) -> list[AllocEvent]:
        """Append what ``decide`` returns for the node's allocations; on a conflict,
        catch up and decide again."""
        for _ in range(10):
            events = decide()
            if not events:
                return []
            try:
                await self.store.append_decided(
                    events, self.projector.alloc_versions.get(node_id, 0))
                return events
            except ConflictError:
                await self._catch_up()
        raise RuntimeError(f"allocations of {node_id} kept changing")

    async def lose_allocations(self, node_id: str, reason: str,
                               cause: str | None = None) -> None:
        node = self.projector.nodes.get(node_id)
        sensitive = node is not None and node.info.node_class is NodeClass.SENSITIVE

        def decide() -> list[AllocEvent]:
            return [AllocLost(node_id=node_id, alloc_id=a.id, reason=reason,
                              requeue_allowed=not sensitive, actor=ACTOR, causation_id=cause)
                    for a in self._live_on(node_id)]

        lost = await self._append_node_allocs(node_id, decide)
        if lost:
            log.warning("%s: %d allocation(s) lost (%s)%s", node_id, len(lost), reason,
                        "; sensitive node: requeue needs an operator" if sensitive else "")
        if sensitive:
            return
        await self._catch_up()
        for job_id in sorted({self.projector.allocs[e.alloc_id].job_id for e in lost}):
            await self._eval_for(job_id, Trigger.NODE_UPDATE, node_id=node_id, cause=cause)

    async def drain(self, node_id: str, urgent: bool, deadline_s: float | None,
                    cause: str | None = None) -> None:
        cfg = self.config.allocations

        def decide() -> list[AllocEvent]:
            return [AllocStopRequested(
                node_id=node_id, alloc_id=a.id, migrate=True,
                reason="urgent drain" if urgent else "drain",
                signal=cfg.checkpoint_signal if urgent else "SIGTERM",
                grace_s=float(cfg.checkpoint_grace) if urgent else 0.0,
                kill_timeout_s=float(cfg.kill_timeout), actor=ACTOR, causation_id=cause)
                for a in self._live_on(node_id) if a.desired == "run"]

        stopping = await self._append_node_allocs(node_id, decide)
        await self._catch_up()
        for job_id in sorted({self.projector.allocs[e.alloc_id].job_id for e in stopping}):
            await self._eval_for(job_id, Trigger.NODE_DRAIN, node_id=node_id, cause=cause)
        if deadline_s:
            loop = asyncio.get_running_loop()
            old = self._deadlines.pop(node_id, None)
            if old is not None:
                old.cancel()
            self._deadlines[node_id] = loop.call_later(
                deadline_s, self._queue.put_nowait, ("deadline", node_id))

    async def drain_deadline(self, node_id: str) -> None:
        """The drain's deadline passed: kill whatever still runs on the node."""
        self._deadlines.pop(node_id, None)
        node = self.projector.nodes.get(node_id)
        if node is None or node.intent is not Intent.DRAINING:
            return

        def decide() -> list[AllocEvent]:
            return [AllocStopRequested(node_id=node_id, alloc_id=a.id, migrate=True,
                                       reason="drain deadline", force=True, actor=ACTOR)
                    for a in self._live_on(node_id)]

        forced = await self._append_node_allocs(node_id, decide)
        if forced:
            log.warning("%s: drain deadline passed; killing %d allocation(s)", node_id,
                        len(forced))

    async def _eval_for(self, job_id: str, trigger: Trigger, *, node_id: str | None = None,
                        causation: AnyEvent | None = None, cause: str | None = None) -> None:
        job = self.projector.jobs.get(job_id)
        if job is None:
            return
        if trigger is Trigger.ALLOC_FAILURE and any(
                e.job_id == job_id and e.status is EvalStatus.PENDING and e.wait_until is None
                for e in self.projector.evals.values()):
            return   # a pending eval of the job will reconcile this failure too
        created = new_eval(trigger, job, node_id=node_id, actor=ACTOR, causation=causation)
        if cause is not None and causation is None:
            created = replace(created, causation_id=cause)
        await self.store.append(created, expected_version=0)

    async def unblock(self) -> None:
        blocked = sorted((e for e in self.projector.evals.values()
                          if e.status is EvalStatus.BLOCKED), key=lambda e: -e.priority)
        for view in blocked:
            try:
                await self.store.append(step(view, Step.UNBLOCK, "capacity changed", ACTOR),
                                        expected_version=view.version)
            except ConflictError:
                pass   # it moved meanwhile
        if blocked:
            log.info("unblocked %d eval(s)", len(blocked))

    async def _gc_loop(self) -> None:
        while True:
            await asyncio.sleep(float(self.config.scheduler.gc_interval))
            try:
                await self.gc()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("eval GC failed")

    async def gc(self) -> int:
        """Delete terminal evals older than ``eval_gc_threshold``; return how many."""
        cutoff = self.now() - timedelta(seconds=float(self.config.scheduler.eval_gc_threshold))
        old = [e for e in list(self.projector.evals.values())
               if e.status in GC_STATUSES and e.modified_at is not None and e.modified_at < cutoff]
        done = 0
        for view in old:
            try:
                await self.store.append(step(view, Step.GC, "older than eval_gc_threshold",
                                             ACTOR), expected_version=view.version)
                done += 1
            except ConflictError:
                pass
        return done


def live_allocations(allocs: dict[str, AllocView], node_id: str) -> int:
    return sum(1 for a in allocs.values() if a.node_id == node_id
               and a.status in (AllocStatus.PENDING, AllocStatus.RUNNING, AllocStatus.STOPPING))
