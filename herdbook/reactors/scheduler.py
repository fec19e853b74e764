"""The scheduler worker (DESIGN §6, Nomad's ``worker.go``), fed by the evaluation broker
(``eval_broker``).

For each eval it reconciles the job, bin-packs the placements and applies the plan as
allocation events (``plan_apply``), one node's events at the version of its allocations
the plan was made from. A conflict goes back to scheduling; after
``max_plan_attempts`` the eval fails and a blocked eval (max-plan-attempts) is created.
What does not fit gets one blocked eval (queued-allocs) per job; older blocked evals of
the job are canceled as duplicates. An eval superseded by a newer pending one for the
same job is canceled.

Every transition is a decision (``eval_deciders``) the one decide runner appends: a
conflict catches up and decides again from the newer view.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

from nats.aio.client import Client as NATS

from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.events.eval_events import EvalCreated, EvalEvent
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.projector.eval_view import EvalView
from herdbook.projector.job_view import JobView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import Context, DecideRunner, Decision, KeptChanging
from herdbook.reactors.eval_broker import BROKER_SUBJECTS, CONSUMER, EvalBroker, advisory_subject
from herdbook.reactors.eval_deciders import (
    BLOCKING,
    DONE,
    NEW,
    decide_blocked,
    decide_cancel,
    decide_delay,
    decide_dequeue,
    decide_give_up,
    decide_link,
    decide_spawn,
    decide_step,
    new_eval,
    newer_pending,
)
from herdbook.reactors.plan_apply import apply_plan, make_plan, node_plans

__all__ = ["BROKER_SUBJECTS", "CONSUMER", "Scheduler", "advisory_subject", "new_eval"]

log = logging.getLogger(__name__)

DecideEval = Callable[[Context], Decision[EvalEvent] | None]


class Scheduler:
    def __init__(self, nc: NATS, projector: ProjectorRunner, config: Config, *,
                 clock: Clock, runner: DecideRunner, concurrency: int = 8) -> None:
        self.projector = projector
        self.model = projector.model
        self.cfg = config.scheduler
        self.allocations = config.allocations
        self.clock = clock
        self.runner = runner
        """The one runner: the eval's decisions, and a plan's node parts (``apply_plan``:
        one attempt each, as one conflict makes the plan stale)."""
        self.expected_alloc_version: Callable[[str], int] = (
            lambda node_id: self.model.alloc_versions.get(node_id, 0))
        """The version a plan on a node expects, read as the plan is made (tests make it
        stale to force conflicts)."""
        self.broker = EvalBroker(nc, projector, config.scheduler, self, clock,
                                 concurrency=concurrency)
        self.given_up = 0
        self.validation_due = (frozenset(config.validation.when)
                               if config.validation.enabled else frozenset())
        """Nodes due for validation for these triggers take no work (``capacities``)."""

    @property
    def processed(self) -> int:
        return self.broker.processed

    async def start(self) -> None:
        await self.broker.start()

    async def stop(self) -> None:
        await self.broker.stop()

    # ------------------------------------------------------------------ the broker's calls
    async def delay(self, eval_id: str) -> None:
        await self._decide(eval_id, lambda context: decide_delay(self._eval(eval_id), context))

    async def give_up(self, eval_id: str, reason: str) -> None:
        """Fail the eval (reaped if never dequeued) and create its failed-follow-up eval,
        delayed by ``failed_follow_up_delay``."""
        await self.projector.catch_up()
        failed = await self._decide(eval_id, lambda _: decide_give_up(self._eval(eval_id),
                                                                      reason))
        if failed is None:
            return
        await self._spawn(eval_id, EvalTrigger.FAILED_FOLLOW_UP,
                          delay_s=float(self.cfg.failed_follow_up_delay))
        self.given_up += 1

    async def process(self, eval_id: str) -> None:
        """Schedule one eval to a final (or blocked) status."""
        await self.projector.catch_up()
        view = self.model.evals[eval_id]
        if view.status in DONE:
            return
        newer = newer_pending(view, self.model.evals.values(), self.clock.now())
        if newer is not None:
            await self._decide(eval_id, lambda _: decide_cancel(
                self._eval(eval_id), f"superseded by eval {newer}"))
            return
        await self._decide(eval_id, lambda _: decide_dequeue(self._eval(eval_id)))
        job = self.model.jobs.get(view.job_id)
        if job is None:
            await self._step(eval_id, Step.FAIL, f"job {view.job_id} not found")
            return
        if job.status == "dead":
            await self._cancel_blocked(view.job_id, f"job {view.job_id} stopped")
        with self.projector.gc.hold():   # the projector's collector, shared with its catch-up
            done = await self._plan_and_apply(eval_id, view, job)
        if done is not None:
            placed, stopped = done
            await self._step(eval_id, Step.PLACED, f"placed {placed}, stopped {stopped}")

    async def _plan_and_apply(self, eval_id: str, view: EvalView,
                              job: JobView) -> tuple[int, int] | None:
        """Plan and apply until a plan lands (what it placed and stopped) or the eval is
        reblocked or failed (None). Runs under the projector's ``gc.hold()``: a plan of thousands of
        placements makes as many events, and a full collection of the control plane's
        heap in its middle cost 125-175 ms each at 10,000 nodes (several per plan)."""
        blocked_spawned = False
        attempts = self.cfg.max_plan_attempts
        for attempt in range(1, attempts + 1):
            if attempt > 1:
                await self.projector.catch_up()
                job = self.model.jobs.get(view.job_id) or job
            plan = make_plan(self.model, job, self.validation_due)
            parts = node_plans(plan, self.expected_alloc_version)
            if (plan.unplaced and not plan.placed and not plan.stops
                    and view.triggered_by in BLOCKING):
                await self._step(eval_id, Step.REBLOCK,
                                 f"{len(plan.unplaced)} allocation(s) still do not fit")
                return None
            if plan.unplaced and not blocked_spawned:
                await self._spawn_blocked(eval_id, EvalTrigger.QUEUED_ALLOCS,
                                          f"{len(plan.unplaced)} allocation(s) do not fit")
                blocked_spawned = True
            if not plan.placed and not plan.stops:
                return 0, 0
            await self._step(eval_id, Step.SUBMIT,
                             f"{len(plan.placed)} to place, {len(plan.stops)} to stop")
            try:
                last = await apply_plan(self.runner, parts, eval_id, job,
                                        float(self.allocations.kill_timeout))
            except KeptChanging as err:
                log.info("eval %s: plan attempt %d/%d conflicted (%s)", eval_id, attempt,
                         attempts, err)
                await self._step(eval_id, Step.PLAN_FAILED, str(err))
                continue
            if last:
                await self.projector.wait_applied(last)
            return len(plan.placed), len(plan.stops)
        await self._spawn_blocked(eval_id, EvalTrigger.MAX_PLAN_ATTEMPTS,
                                  f"plan conflicted {attempts} times")
        await self._step(eval_id, Step.FAIL, "max plan attempts exceeded")
        return None

    # ------------------------------------------------------------------ decisions
    def _eval(self, eval_id: str) -> EvalView | None:
        return self.model.evals.get(eval_id)

    async def _decide(self, eval_id: str, decide: DecideEval) -> EvalView | None:
        """Run one decision on the eval; its view afterwards (None: nothing was due)."""
        done = await self.runner.run("eval", eval_id, decide)
        return self._eval(eval_id) if done.events else None

    async def _step(self, eval_id: str, how: Step, reason: str = "") -> None:
        await self._decide(eval_id, lambda _: decide_step(self._eval(eval_id), how, reason))

    async def _cancel_blocked(self, job_id: str, reason: str) -> None:
        """blocked -- if no-op --> canceled: a stopped job waits for no capacity."""
        for other in [e.id for e in self.model.evals.values()
                      if e.job_id == job_id and e.status is EvalStatus.BLOCKED]:
            await self._decide(other, partial(self._blocked, other, Step.NO_OP, reason))

    async def _spawn_blocked(self, eval_id: str, trigger: EvalTrigger, reason: str) -> None:
        """A new blocked eval for the job; older blocked evals of the job are duplicates."""
        view = self.model.evals[eval_id]
        old_blocked = [e.id for e in self.model.evals.values()
                       if e.job_id == view.job_id and e.status is EvalStatus.BLOCKED
                       and e.id != eval_id]
        blocked = await self._spawn(eval_id, trigger, reason=reason)
        for dup in old_blocked:
            await self._decide(dup, partial(self._blocked, dup, Step.REAP_DUPLICATE,
                                            f"duplicate of blocked eval {blocked}"))

    def _blocked(self, eval_id: str, how: Step, reason: str,
                 context: Context) -> Decision[EvalEvent] | None:
        return decide_blocked(self._eval(eval_id), how, reason)

    async def _spawn(self, eval_id: str, trigger: EvalTrigger, *, reason: str = "",
                     delay_s: float | None = None) -> str:
        """A new eval from this one (a dashed arrow), then this one's pointer to it."""
        created = await self.runner.run("eval", NEW, lambda context: decide_spawn(
            self._eval(eval_id), trigger, context, delay_s=delay_s))
        [event] = created.events
        assert isinstance(event, EvalCreated)
        await self._decide(eval_id, lambda _: decide_link(self._eval(eval_id), trigger,
                                                          event.eval_id))
        log.info("eval %s: new %s eval %s %s", eval_id, trigger.value, event.eval_id, reason)
        return event.eval_id
