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

What is due is decided by the pure deciders in ``alloc_deciders`` and ``eval_deciders``;
this reactor turns node and allocation changes into those decisions and hands each to
the one decide runner (a conflict catches up and decides again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from herdbook.config import Config
from herdbook.events.alloc import AllocEvent, AllocFailed, AllocLost
from herdbook.events.eval_events import EvalEvent
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.events.node import (
    NodeDeleted,
    NodeDisabled,
    NodeDown,
    NodeDrainStarted,
    NodeEvent,
    NodeInfoUpdated,
    NodeTerminated,
)
from herdbook.events.states import Intent, Lifecycle
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.alloc_deciders import (
    ACTOR,
    DrainAllocations,
    KillAtDrainDeadline,
    LoseAllocations,
    decide_drain,
    decide_drain_deadline,
    decide_lost,
    jobs_of,
    sensitive,
)
from herdbook.reactors.decide_runner import Context, DecideRunner, Decision
from herdbook.reactors.eval_deciders import NEW, decide_blocked, decide_gc, decide_job_eval

log = logging.getLogger(__name__)

LOSING = (NodeDown, NodeDisabled, NodeDeleted, NodeTerminated)


class AllocationReactor:
    def __init__(self, projector: ProjectorRunner, config: Config, *,
                 runner: DecideRunner) -> None:
        self.projector = projector
        self.model = projector.model
        self.config = config
        self.runner = runner
        self._unsubscribe: list[Callable[[], None]] = []
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._schedulable: dict[str, bool] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._unblock_pending = False
        self._deadlines: dict[str, asyncio.TimerHandle] = {}

    def start(self) -> None:
        self._schedulable = {n.id: n.schedulable for n in self.model.nodes.values()}
        self._unsubscribe = [self.model.nodes.subscribe(self._on_node),
                             self.model.allocs.subscribe(self._on_alloc)]
        self._tasks = [asyncio.create_task(self._work(), name="allocations"),
                       asyncio.create_task(self._gc_loop(), name="eval-gc")]
        # Work a restart may have missed: lost allocations on nodes already gone, and
        # blocked evals that capacity may fit now.
        for node in self.model.nodes.values():
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
            self._queue.put_nowait(("alloc-failure", (view.job_id, event.event_id)))
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
                await self.projector.catch_up()
                if kind == "lost":
                    await self.lose_allocations(*arg)
                elif kind == "drain":
                    await self.drain(*arg)
                elif kind == "alloc-failure":
                    await self._eval_for(arg[0], EvalTrigger.ALLOC_FAILURE, cause=arg[1])
                elif kind == "unblock":
                    await asyncio.sleep(float(self.config.scheduler.unblock_delay))
                    self._unblock_pending = False
                    await self.projector.catch_up()
                    await self.unblock()
                elif kind == "deadline":
                    await self.drain_deadline(arg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("allocation reactor: %s %s failed; retrying in 1s", kind, arg)
                await asyncio.sleep(1.0)
                self._queue.put_nowait((kind, arg))

    async def lose_allocations(self, node_id: str, reason: str,
                               cause: str | None = None) -> None:
        command = LoseAllocations(node_id, reason, cause)
        lost = (await self.runner.run(
            "alloc", node_id, lambda context: decide_lost(self.model, command, context))).events
        keep = sensitive(self.model, node_id)
        if lost:
            log.warning("%s: %d allocation(s) lost (%s)%s", node_id, len(lost), reason,
                        "; sensitive node: requeue needs an operator" if keep else "")
        if keep:
            return
        for job_id in jobs_of(self.model, lost):
            await self._eval_for(job_id, EvalTrigger.NODE_UPDATE, node_id=node_id, cause=cause)

    async def drain(self, node_id: str, urgent: bool, deadline_s: float | None,
                    cause: str | None = None) -> None:
        cfg = self.config.allocations
        command = DrainAllocations(node_id, urgent, cfg.checkpoint_signal,
                                   float(cfg.checkpoint_grace), float(cfg.kill_timeout), cause)
        stopping = (await self.runner.run(
            "alloc", node_id, lambda context: decide_drain(self.model, command, context))).events
        for job_id in jobs_of(self.model, stopping):
            await self._eval_for(job_id, EvalTrigger.NODE_DRAIN, node_id=node_id, cause=cause)
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
        command = KillAtDrainDeadline(node_id)
        forced = (await self.runner.run(
            "alloc", node_id,
            lambda context: decide_drain_deadline(self.model, command, context))).events
        if forced:
            log.warning("%s: drain deadline passed; killing %d allocation(s)", node_id,
                        len(forced))

    async def _eval_for(self, job_id: str, trigger: EvalTrigger, *, node_id: str | None = None,
                        cause: str | None = None) -> None:
        await self.runner.run("eval", NEW, lambda context: decide_job_eval(
            self.model.jobs.get(job_id), self.model.evals.values(), trigger, context,
            node_id=node_id, causation_id=cause, actor=ACTOR), wait=False)

    async def unblock(self) -> None:
        blocked = sorted((e for e in self.model.evals.values()
                          if e.status is EvalStatus.BLOCKED), key=lambda e: -e.priority)
        for view in blocked:
            await self.runner.run("eval", view.id, partial(self._unblock, view.id), wait=False)
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
        threshold = float(self.config.scheduler.eval_gc_threshold)
        done = 0
        for eval_id in list(self.model.evals):
            collected = await self.runner.run(
                "eval", eval_id, partial(self._collect, eval_id, threshold), wait=False)
            done += bool(collected.events)
        return done

    def _unblock(self, eval_id: str, context: Context) -> Decision[EvalEvent] | None:
        return decide_blocked(self.model.evals.get(eval_id), Step.UNBLOCK, "capacity changed",
                              actor=ACTOR)

    def _collect(self, eval_id: str, threshold_s: float,
                 context: Context) -> Decision[EvalEvent] | None:
        return decide_gc(self.model.evals.get(eval_id), threshold_s, context, actor=ACTOR)
