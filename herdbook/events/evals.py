"""Nomad's evaluation model (reference/nomad-eval-states.txt), as tables in code.

Statuses are stored; quasi-statuses (scheduling, applying, delayed, deleted) are shown
by the view. ``TRANSITIONS`` holds the solid arrows of the reference's second diagram,
``SPAWNS`` the dashed ones (a new eval is created) with the PreviousEval / NextEval /
BlockedEval pointers exactly as the reference draws them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class EvalStatus(StrEnum):
    PENDING = "pending"
    BLOCKED = "blocked"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELED = "canceled"
    # quasi-statuses: shown by the view, never stored as Status
    SCHEDULING = "scheduling"
    APPLYING = "applying"
    DELAYED = "delayed"
    DELETED = "deleted"


STORED = frozenset({EvalStatus.PENDING, EvalStatus.BLOCKED, EvalStatus.COMPLETE,
                    EvalStatus.FAILED, EvalStatus.CANCELED})
QUASI = frozenset(EvalStatus) - STORED


class EvalTrigger(StrEnum):
    """TriggeredBy of a new evaluation."""

    JOB_REGISTER = "job-register"
    JOB_DEREGISTER = "job-deregister"
    PERIODIC_JOB = "periodic-job"
    NODE_UPDATE = "node-update"
    NODE_DRAIN = "node-drain"
    ALLOC_STOP = "alloc-stop"
    SCHEDULED = "scheduled"
    ALLOC_FAILURE = "alloc-failure"
    JOB_SCALING = "job-scaling"
    QUEUED_ALLOCS = "queued-allocs"
    MAX_PLAN_ATTEMPTS = "max-plan-attempts"
    ROLLING_UPDATE = "rolling-update"
    PREEMPTION = "preemption"
    DEPLOYMENT_WATCHER = "deployment-watcher"
    FAILED_FOLLOW_UP = "failed-follow-up"


T = EvalTrigger

# Cluster events create pending evals with these triggers (the first arrow).
CLUSTER_TRIGGERS = frozenset({
    T.JOB_REGISTER, T.JOB_DEREGISTER, T.PERIODIC_JOB, T.NODE_UPDATE, T.NODE_DRAIN,
    T.ALLOC_STOP, T.SCHEDULED, T.ALLOC_FAILURE, T.JOB_SCALING,
})


class Step(StrEnum):
    """What happens to an existing eval (the solid arrows)."""

    DEQUEUE = "dequeued"
    DELAY = "delayed"
    REBLOCK = "not all allocs placed, reuse already-blocked eval"
    UNBLOCK = "unblocked by external state changes"
    PLACED = "allocs placed"
    FAIL = "wrong eval type or max retries exceeded on plan submit"
    CANCEL = "canceled by job update/stop"
    RETRY = "retry"
    SUBMIT = "submit"
    PLAN_FAILED = "plan failed"
    REAP_UNDELIVERABLE = "undeliverable evals reaped by leader"
    REAP_DUPLICATE = "duplicate blocked evals reaped by leader"
    GC = "garbage collection"
    PLAN_SUBMITTED = "if plan submitted"     # first diagram: pending/blocked/failed -> complete
    INVALID = "if invalid"
    NO_OP = "if no-op"


S = EvalStatus

TRANSITIONS: dict[tuple[EvalStatus, Step], EvalStatus] = {
    (S.PENDING, Step.DEQUEUE): S.SCHEDULING,
    (S.PENDING, Step.DELAY): S.DELAYED,
    (S.DELAYED, Step.DEQUEUE): S.SCHEDULING,
    (S.SCHEDULING, Step.REBLOCK): S.BLOCKED,
    (S.BLOCKED, Step.UNBLOCK): S.SCHEDULING,
    (S.SCHEDULING, Step.PLACED): S.COMPLETE,
    (S.SCHEDULING, Step.FAIL): S.FAILED,
    (S.SCHEDULING, Step.CANCEL): S.CANCELED,
    (S.FAILED, Step.RETRY): S.SCHEDULING,
    (S.SCHEDULING, Step.SUBMIT): S.APPLYING,
    (S.APPLYING, Step.PLAN_FAILED): S.SCHEDULING,
    (S.APPLYING, Step.PLACED): S.COMPLETE,
    (S.PENDING, Step.REAP_UNDELIVERABLE): S.FAILED,
    (S.BLOCKED, Step.REAP_DUPLICATE): S.CANCELED,
    (S.CANCELED, Step.GC): S.DELETED,
    (S.FAILED, Step.GC): S.DELETED,
    (S.COMPLETE, Step.GC): S.DELETED,
    # the first diagram's solid arrows, in stored statuses
    (S.PENDING, Step.PLAN_SUBMITTED): S.COMPLETE,
    (S.PENDING, Step.INVALID): S.FAILED,
    (S.PENDING, Step.NO_OP): S.CANCELED,
    (S.FAILED, Step.PLAN_SUBMITTED): S.COMPLETE,
    (S.BLOCKED, Step.NO_OP): S.CANCELED,
    (S.BLOCKED, Step.PLAN_SUBMITTED): S.COMPLETE,
}


def next_status(current: EvalStatus, step: Step) -> EvalStatus | None:
    return TRANSITIONS.get((current, step))


@dataclass(frozen=True)
class Spawn:
    """A dashed arrow: from an eval in ``source`` a new eval with ``trigger`` is created in
    ``status``; which pointers are set."""

    source: EvalStatus
    trigger: EvalTrigger
    status: EvalStatus
    new_previous: bool        # new.PreviousEval = old.ID
    old_pointer: str | None   # "next_eval" or "blocked_eval" on the old eval, or None


SPAWNS: dict[EvalTrigger, Spawn] = {
    T.QUEUED_ALLOCS: Spawn(S.SCHEDULING, T.QUEUED_ALLOCS, S.BLOCKED, True, "blocked_eval"),
    T.MAX_PLAN_ATTEMPTS: Spawn(S.SCHEDULING, T.MAX_PLAN_ATTEMPTS, S.BLOCKED, True,
                               "blocked_eval"),
    T.ROLLING_UPDATE: Spawn(S.SCHEDULING, T.ROLLING_UPDATE, S.PENDING, True, "next_eval"),
    T.PREEMPTION: Spawn(S.APPLYING, T.PREEMPTION, S.PENDING, False, None),
    T.DEPLOYMENT_WATCHER: Spawn(S.COMPLETE, T.DEPLOYMENT_WATCHER, S.PENDING, False, None),
    T.FAILED_FOLLOW_UP: Spawn(S.FAILED, T.FAILED_FOLLOW_UP, S.PENDING, True, "next_eval"),
}


def transitions_markdown() -> str:
    rows = ["| from | step | to |", "|---|---|---|"]
    rows += [f"| {src.value} | {step.value} | {dst.value} |"
             for (src, step), dst in TRANSITIONS.items()]
    rows += ["", "| from | new eval (TriggeredBy) | new status | new.PreviousEval | old pointer |",
             "|---|---|---|---|---|"]
    rows += [f"| {s.source.value} | {s.trigger.value} | {s.status.value} | "
             f"{'old.ID' if s.new_previous else 'unset'} | "
             f"{'old.' + s.old_pointer + ' = new.ID' if s.old_pointer else 'unset'} |"
             for s in SPAWNS.values()]
    return "\n".join(rows)
