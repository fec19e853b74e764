"""The deciders of the evaluation broker, the scheduler worker and the allocation
reactor: pure functions from an eval's view (or a job's) and the context to the eval
events due. The diagram's arrows are ``step`` and ``spawn`` (``projector/eval_view``);
these choose which arrows to take. A decider returns None when the eval is not (or no
longer) where the arrow starts: after a conflict the runner decides again from the
newer view, and an eval that moved meanwhile is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from msgspec.structs import replace

from herdbook.events.base import Event, new_id
from herdbook.events.eval_events import EvalCreated, EvalEvent
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.projector.eval_view import EvalView, spawn, step
from herdbook.projector.job_view import JobView
from herdbook.reactors.decide_runner import Context, Decision

ACTOR = "scheduler"
NEW = "new"
"""The aggregate id a run names when its decision creates an eval: the decider draws the
new id from its context and expects version 0 of it (a conflict would mean the id was
taken, and the runner decides again with a fresh one)."""

DONE = frozenset({EvalStatus.COMPLETE, EvalStatus.FAILED, EvalStatus.CANCELED,
                  EvalStatus.DELETED, EvalStatus.BLOCKED})
"""An eval in one of these is not the broker's business (blocked ones wait to be
unblocked, which enqueues them again)."""
BLOCKING = frozenset({EvalTrigger.QUEUED_ALLOCS, EvalTrigger.MAX_PLAN_ATTEMPTS})
COLLECTABLE = frozenset({EvalStatus.COMPLETE, EvalStatus.FAILED, EvalStatus.CANCELED})


def steps(view: EvalView, *arrows: tuple[Step, str], actor: str = ACTOR
          ) -> Decision[EvalEvent]:
    """Take ``arrows`` one after the other from the view's status: one decision, one
    version (each refused when the diagram has no such arrow)."""
    events: list[EvalEvent] = []
    status = view.status
    for how, reason in arrows:
        event = step(replace(view, status=status), how, reason, actor)
        events.append(event)
        status = event.status
    return Decision(view.version, events)


def decide_step(view: EvalView | None, how: Step, reason: str = "", *,
                actor: str = ACTOR) -> Decision[EvalEvent] | None:
    return None if view is None else steps(view, (how, reason), actor=actor)


def delay_of(view: EvalView, now: datetime) -> float:
    """Seconds until a delayed eval may be dequeued (0: now)."""
    if view.wait_until is None:
        return 0.0
    return max(0.0, (view.wait_until - now).total_seconds())


def decide_delay(view: EvalView | None, context: Context) -> Decision[EvalEvent] | None:
    """pending -- delayed --> delayed, while its ``wait_until`` is ahead."""
    if view is None or view.status is not EvalStatus.PENDING or not delay_of(view, context.now):
        return None
    return steps(view, (Step.DELAY, f"delayed until {view.wait_until}"))


def decide_dequeue(view: EvalView | None) -> Decision[EvalEvent] | None:
    """To scheduling: from pending or delayed, or from applying when the worker that
    applied it died (redelivered)."""
    if view is None:
        return None
    if view.status in (EvalStatus.PENDING, EvalStatus.DELAYED):
        return steps(view, (Step.DEQUEUE, ""))
    if view.status is EvalStatus.APPLYING:
        return steps(view, (Step.PLAN_FAILED, "resumed after redelivery"))
    return None


BACK_TO_SCHEDULING = {EvalStatus.DELAYED: Step.DEQUEUE, EvalStatus.APPLYING: Step.PLAN_FAILED}
"""The arrow that brings a live eval back to scheduling, where it can end."""


def _end(view: EvalView | None, reason: str, *, pending: Step, last: Step,
         back_reason: str) -> Decision[EvalEvent] | None:
    """An eval that is not done yet ends: by ``pending`` if it was never dequeued, else
    back to scheduling (with ``back_reason``) and ``last`` from there."""
    if view is None or view.status in DONE:
        return None
    if view.status is EvalStatus.PENDING:
        return steps(view, (pending, reason))
    back = BACK_TO_SCHEDULING.get(view.status)
    arrows = [(back, back_reason)] if back is not None else []
    return steps(view, *arrows, (last, reason))


def decide_cancel(view: EvalView | None, reason: str) -> Decision[EvalEvent] | None:
    """Superseded: a pending eval is a no-op; one further along is canceled from
    scheduling."""
    return _end(view, reason, pending=Step.NO_OP, last=Step.CANCEL, back_reason="")


def decide_give_up(view: EvalView | None, reason: str) -> Decision[EvalEvent] | None:
    """Failed after its last delivery: reaped if it was never dequeued, else failed from
    scheduling."""
    return _end(view, reason, pending=Step.REAP_UNDELIVERABLE, last=Step.FAIL,
                back_reason=reason)


def decide_blocked(view: EvalView | None, how: Step, reason: str, *,
                   actor: str = ACTOR) -> Decision[EvalEvent] | None:
    """An arrow from blocked (unblock, no-op, reap as duplicate), if it is still blocked:
    one unblocked meanwhile is not a duplicate any more."""
    if view is None or view.status is not EvalStatus.BLOCKED:
        return None
    return steps(view, (how, reason), actor=actor)


def decide_gc(view: EvalView | None, threshold_s: float, context: Context, *,
              actor: str = ACTOR) -> Decision[EvalEvent] | None:
    """complete/failed/canceled -- garbage collection --> deleted, once older than the
    threshold."""
    if view is None or view.status not in COLLECTABLE or view.modified_at is None:
        return None
    if view.modified_at >= context.now - timedelta(seconds=threshold_s):
        return None
    return steps(view, (Step.GC, "older than eval_gc_threshold"), actor=actor)


def decide_spawn(old: EvalView | None, trigger: EvalTrigger, context: Context, *,
                 delay_s: float | None = None) -> Decision[EvalCreated] | None:
    """A dashed arrow's new eval (its id from the context), delayed by ``delay_s``. The
    old eval's pointer is a second decision (``decide_link``), on the old eval."""
    if old is None:
        return None
    wait_until = context.now + timedelta(seconds=delay_s) if delay_s is not None else None
    created = spawn(old, trigger, context.new_id(), old.job_id, priority=old.priority,
                    wait_until=wait_until, actor=ACTOR)[0]
    assert isinstance(created, EvalCreated)
    return Decision(0, [created])


def decide_link(old: EvalView | None, trigger: EvalTrigger, new: str
                ) -> Decision[EvalEvent] | None:
    """The old eval's NextEval/BlockedEval pointer to ``new``, where the diagram draws one."""
    if old is None:
        return None
    return Decision(old.version, spawn(old, trigger, new, old.job_id, actor=ACTOR)[1:])


def decide_job_eval(job: JobView | None, evals: Iterable[EvalView], trigger: EvalTrigger,
                    context: Context, *, node_id: str | None = None,
                    causation_id: str | None = None, actor: str = ACTOR
                    ) -> Decision[EvalCreated] | None:
    """A pending eval for a cluster event on ``job`` (the diagram's first arrow). An
    alloc failure needs none while a pending eval of the job will reconcile it too."""
    if job is None:
        return None
    if trigger is EvalTrigger.ALLOC_FAILURE and any(
            e.job_id == job.id and e.status is EvalStatus.PENDING and e.wait_until is None
            for e in evals):
        return None
    created = cluster_eval(trigger, job, context.new_id(), node_id=node_id, actor=actor)
    return Decision(0, [replace(created, causation_id=causation_id)])


def newer_pending(view: EvalView, evals: Iterable[EvalView], now: datetime) -> str | None:
    """A pending eval of the same job created after this one and due now: it will do the
    same reconciliation on a newer state, so this one is superseded. (Blocked evals are
    never superseded: they stand for capacity the job still waits for.)"""
    if view.triggered_by in BLOCKING or view.created_at is None:
        return None
    for other in evals:
        if (other.job_id == view.job_id and other.id != view.id
                and other.status is EvalStatus.PENDING and other.created_at is not None
                and other.created_at > view.created_at and delay_of(other, now) == 0):
            return other.id
    return None


def cluster_eval(trigger: EvalTrigger, job: JobView, eval_id: str, *,
                 node_id: str | None = None, actor: str = ACTOR) -> EvalCreated:
    [created] = spawn(None, trigger, eval_id, job.id, priority=job.spec.priority,
                      node_id=node_id, actor=actor)
    assert isinstance(created, EvalCreated)
    return created


def new_eval(trigger: EvalTrigger, job: JobView, *, node_id: str | None = None,
             actor: str = ACTOR, causation: Event | None = None) -> EvalCreated:
    """A pending eval with a fresh id, for a caller outside a decision (a test, a
    benchmark); deciders draw the id from their context (``decide_job_eval``)."""
    created = cluster_eval(trigger, job, new_id(), node_id=node_id, actor=actor)
    if causation is not None:
        created = replace(created, causation_id=causation.event_id)
    return created
