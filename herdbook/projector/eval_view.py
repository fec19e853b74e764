"""The evaluation view, its pure fold, and the pure rules that create evals."""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec.structs import replace

from herdbook.events.eval_events import (
    EvalCreated,
    EvalEnqueued,
    EvalEvent,
    EvalLinked,
    EvalStatusChanged,
)
from herdbook.events.evals import SPAWNS, EvalStatus, EvalTrigger, Step, next_status


class EvalView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    job_id: str
    status: EvalStatus
    triggered_by: EvalTrigger
    priority: int = 50
    previous_eval: str | None = None
    next_eval: str | None = None
    blocked_eval: str | None = None
    node_id: str | None = None
    wait_until: datetime | None = None
    status_reason: str = ""
    created_at: datetime | None = None
    modified_at: datetime | None = None
    version: int = 0


def apply_eval(view: EvalView | None, event: EvalEvent, seq: int) -> EvalView | None:
    match event:
        case EvalCreated():
            return EvalView(
                id=event.eval_id, job_id=event.job_id, status=event.status,
                triggered_by=event.triggered_by, priority=event.priority,
                previous_eval=event.previous_eval, node_id=event.node_id,
                wait_until=event.wait_until, created_at=event.at, modified_at=event.at,
                version=seq)
    if view is None:
        return None
    view = replace(view, modified_at=event.at, version=seq)
    match event:
        case EvalStatusChanged(status=EvalStatus.DELETED):
            return None   # garbage-collected: gone from the view, kept in the log
        case EvalStatusChanged(status=status, reason=reason):
            return replace(view, status=status, status_reason=reason)
        case EvalLinked(next_eval=next_eval, blocked_eval=blocked_eval):
            return replace(view, next_eval=next_eval or view.next_eval,
                           blocked_eval=blocked_eval or view.blocked_eval)
    return view


class EvalRefused(ValueError):
    pass


def step(view: EvalView, how: Step, reason: str = "", actor: str = "scheduler"
         ) -> EvalStatusChanged:
    """The event for one solid arrow; refused when the diagram has no such arrow."""
    target = next_status(view.status, how)
    if target is None:
        raise EvalRefused(f"eval {view.id} is {view.status.value}: cannot {how.value}")
    kind = EvalEnqueued if how in ENQUEUING else EvalStatusChanged
    return kind(eval_id=view.id, step=how, status=target, reason=reason, actor=actor)


ENQUEUING = frozenset({Step.UNBLOCK, Step.RETRY})
"""Steps after which the broker delivers the eval again."""


def spawn(old: EvalView | None, trigger: EvalTrigger, new_id: str, job_id: str, *,
          priority: int = 50, node_id: str | None = None,
          wait_until: datetime | None = None, actor: str = "scheduler"
          ) -> list[EvalEvent]:
    """A new eval, with the pointers the reference draws for ``trigger``: cluster events
    have no old eval; spawned evals set new.PreviousEval and old.NextEval/BlockedEval
    only where the diagram says so."""
    rule = SPAWNS.get(trigger)
    if rule is None:
        return [EvalCreated(eval_id=new_id, job_id=job_id, triggered_by=trigger,
                            priority=priority, node_id=node_id, wait_until=wait_until,
                            actor=actor)]
    if old is None or old.status is not rule.source:
        raise EvalRefused(f"a {trigger.value} eval is spawned from a {rule.source.value} eval")
    events: list[EvalEvent] = [EvalCreated(
        eval_id=new_id, job_id=job_id, triggered_by=trigger, status=rule.status,
        priority=priority, previous_eval=old.id if rule.new_previous else None,
        node_id=node_id, wait_until=wait_until, actor=actor)]
    if rule.old_pointer == "next_eval":
        events.append(EvalLinked(eval_id=old.id, next_eval=new_id, actor=actor))
    elif rule.old_pointer == "blocked_eval":
        events.append(EvalLinked(eval_id=old.id, blocked_eval=new_id, actor=actor))
    return events
