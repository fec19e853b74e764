"""The deciders of the broker, the worker and the allocation reactor on evals, without
I/O: given an eval's view (and the context's time and ids), then these arrows of the
reference diagram, one decision at the eval's version."""

from __future__ import annotations

from datetime import timedelta

from herdbook.events.eval_events import EvalCreated, EvalEnqueued, EvalLinked
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.events.job_events import JobSpec
from herdbook.projector.eval_view import EvalView
from herdbook.projector.job_view import JobView
from herdbook.reactors.decide_runner import Decision
from herdbook.reactors.eval_deciders import (
    decide_blocked,
    decide_cancel,
    decide_delay,
    decide_dequeue,
    decide_gc,
    decide_give_up,
    decide_job_eval,
    decide_link,
    decide_spawn,
    newer_pending,
)
from tests.world import T0, context

S = EvalStatus


def an_eval(status: EvalStatus, *, eval_id: str = "e1", job_id: str = "train",
            trigger: EvalTrigger = EvalTrigger.JOB_REGISTER, version: int = 7,
            **fields: object) -> EvalView:
    return EvalView(id=eval_id, job_id=job_id, status=status, triggered_by=trigger,
                    version=version, **fields)  # type: ignore[arg-type]


def arrows(decision: Decision[object] | None) -> list[tuple[str, EvalStatus, str]]:
    assert decision is not None and decision.expected == 7
    return [(e.step.value, e.status, e.reason) for e in decision.events]  # type: ignore[attr-defined]


def test_a_pending_eval_due_later_is_delayed_and_one_due_now_is_not() -> None:
    later = an_eval(S.PENDING, wait_until=T0 + timedelta(seconds=5))
    assert arrows(decide_delay(later, context())) == [
        ("delayed", S.DELAYED, f"delayed until {T0 + timedelta(seconds=5)}")]
    assert decide_delay(later, context(T0 + timedelta(seconds=5))) is None
    assert decide_delay(an_eval(S.PENDING), context()) is None
    assert decide_delay(an_eval(S.DELAYED, wait_until=T0 + timedelta(1)), context()) is None


def test_dequeue_from_pending_delayed_or_a_dead_workers_applying() -> None:
    assert arrows(decide_dequeue(an_eval(S.PENDING))) == [("dequeued", S.SCHEDULING, "")]
    assert arrows(decide_dequeue(an_eval(S.DELAYED))) == [("dequeued", S.SCHEDULING, "")]
    assert arrows(decide_dequeue(an_eval(S.APPLYING))) == [
        ("plan failed", S.SCHEDULING, "resumed after redelivery")]
    assert decide_dequeue(an_eval(S.SCHEDULING)) is None
    assert decide_dequeue(None) is None


def test_a_superseded_eval_is_canceled_from_wherever_it_is() -> None:
    why = "superseded by eval e2"
    assert arrows(decide_cancel(an_eval(S.PENDING), why)) == [("if no-op", S.CANCELED, why)]
    assert arrows(decide_cancel(an_eval(S.SCHEDULING), why)) == [
        ("canceled by job update/stop", S.CANCELED, why)]
    assert arrows(decide_cancel(an_eval(S.DELAYED), why)) == [
        ("dequeued", S.SCHEDULING, ""), ("canceled by job update/stop", S.CANCELED, why)]
    assert arrows(decide_cancel(an_eval(S.APPLYING), why)) == [
        ("plan failed", S.SCHEDULING, ""), ("canceled by job update/stop", S.CANCELED, why)]
    assert decide_cancel(an_eval(S.COMPLETE), why) is None


def test_giving_up_reaps_a_never_dequeued_eval_and_fails_one_further_along() -> None:
    why = "delivery limit reached"
    assert arrows(decide_give_up(an_eval(S.PENDING), why)) == [
        ("undeliverable evals reaped by leader", S.FAILED, why)]
    fail = ("wrong eval type or max retries exceeded on plan submit", S.FAILED, why)
    assert arrows(decide_give_up(an_eval(S.APPLYING), why)) == [
        ("plan failed", S.SCHEDULING, why), fail]
    assert arrows(decide_give_up(an_eval(S.DELAYED), why)) == [
        ("dequeued", S.SCHEDULING, why), fail]
    assert arrows(decide_give_up(an_eval(S.SCHEDULING), why)) == [fail]
    for done in (S.COMPLETE, S.FAILED, S.CANCELED, S.BLOCKED):
        assert decide_give_up(an_eval(done), why) is None


def test_only_a_blocked_eval_is_unblocked_or_reaped() -> None:
    decision = decide_blocked(an_eval(S.BLOCKED), Step.UNBLOCK, "capacity changed")
    assert arrows(decision) == [("unblocked by external state changes", S.SCHEDULING,
                                 "capacity changed")]
    assert decision is not None and isinstance(decision.events[0], EvalEnqueued)
    assert decide_blocked(an_eval(S.SCHEDULING), Step.UNBLOCK, "x") is None   # moved meanwhile
    assert decide_blocked(None, Step.NO_OP, "x") is None


def test_gc_deletes_a_terminal_eval_older_than_the_threshold_by_the_contexts_time() -> None:
    old = an_eval(S.COMPLETE, modified_at=T0)
    assert decide_gc(old, 3600.0, context(T0 + timedelta(hours=1))) is None
    assert arrows(decide_gc(old, 3600.0, context(T0 + timedelta(hours=1, seconds=1)))) == [
        ("garbage collection", S.DELETED, "older than eval_gc_threshold")]
    assert decide_gc(an_eval(S.BLOCKED, modified_at=T0), 1.0, context(T0 + timedelta(1))) is None


def test_a_failed_follow_up_takes_its_id_and_delay_from_the_context_and_links_back() -> None:
    failed = an_eval(S.FAILED, priority=70)
    decision = decide_spawn(failed, EvalTrigger.FAILED_FOLLOW_UP, context(), delay_s=60.0)
    assert decision is not None and decision.expected == 0
    [created] = decision.events
    assert isinstance(created, EvalCreated)
    assert (created.eval_id, created.job_id, created.status, created.previous_eval,
            created.priority, created.wait_until) == (
        "id0001", "train", S.PENDING, "e1", 70, T0 + timedelta(seconds=60))
    link = decide_link(failed, EvalTrigger.FAILED_FOLLOW_UP, "id0001")
    assert link is not None and link.expected == 7
    assert [(type(e), e.next_eval, e.blocked_eval) for e in link.events
            if isinstance(e, EvalLinked)] == [(EvalLinked, "id0001", None)]


def test_a_queued_allocs_eval_is_created_blocked_and_set_as_the_old_ones_blocked_eval() -> None:
    scheduling = an_eval(S.SCHEDULING)
    decision = decide_spawn(scheduling, EvalTrigger.QUEUED_ALLOCS, context())
    assert decision is not None
    [created] = decision.events
    assert (created.status, created.wait_until) == (S.BLOCKED, None)
    link = decide_link(scheduling, EvalTrigger.QUEUED_ALLOCS, created.eval_id)
    assert link is not None
    assert [e.blocked_eval for e in link.events if isinstance(e, EvalLinked)] == ["id0001"]


def job(job_id: str = "train", priority: int = 60) -> JobView:
    return JobView(id=job_id, spec=JobSpec(id=job_id, command=["true"], priority=priority))


def test_a_cluster_event_creates_a_pending_eval_with_the_contexts_id_and_its_cause() -> None:
    decision = decide_job_eval(job(), [], EvalTrigger.NODE_UPDATE, context(), node_id="n1",
                               causation_id="down-1", actor="allocations")
    assert decision is not None and decision.expected == 0
    [created] = decision.events
    assert (created.eval_id, created.job_id, created.triggered_by, created.status,
            created.priority, created.node_id, created.causation_id, created.actor) == (
        "id0001", "train", EvalTrigger.NODE_UPDATE, S.PENDING, 60, "n1", "down-1", "allocations")


def test_no_eval_for_a_job_that_is_gone_nor_for_a_failure_a_pending_eval_covers() -> None:
    assert decide_job_eval(None, [], EvalTrigger.NODE_UPDATE, context()) is None
    pending = an_eval(S.PENDING)
    assert decide_job_eval(job(), [pending], EvalTrigger.ALLOC_FAILURE, context()) is None
    delayed = an_eval(S.PENDING, wait_until=T0)
    assert decide_job_eval(job(), [delayed], EvalTrigger.ALLOC_FAILURE, context()) is not None
    assert decide_job_eval(job(), [pending], EvalTrigger.NODE_UPDATE, context()) is not None


def test_an_eval_is_superseded_by_a_newer_pending_eval_of_its_job_that_is_due() -> None:
    view = an_eval(S.PENDING, created_at=T0)
    newer = an_eval(S.PENDING, eval_id="e2", created_at=T0 + timedelta(seconds=1))
    later = an_eval(S.PENDING, eval_id="e3", created_at=T0 + timedelta(seconds=2),
                    wait_until=T0 + timedelta(hours=1))
    other_job = an_eval(S.PENDING, eval_id="e4", job_id="x", created_at=T0 + timedelta(1))
    assert newer_pending(view, [view, later, other_job, newer], T0) == "e2"
    assert newer_pending(view, [view, later, other_job], T0) is None
    assert newer_pending(view, [view, later], T0 + timedelta(hours=1)) == "e3"
    blocked = an_eval(S.BLOCKED, trigger=EvalTrigger.QUEUED_ALLOCS, created_at=T0)
    assert newer_pending(blocked, [newer], T0) is None
