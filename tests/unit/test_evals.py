"""Harness tests for every evaluation transition of the Nomad reference diagram, and the
PreviousEval / NextEval / BlockedEval pointers exactly as it draws them."""

from __future__ import annotations

import itertools
from pathlib import Path

import msgspec
import pytest

from herdbook.events.eval_events import EvalCreated, EvalEnqueued, EvalLinked
from herdbook.events.evals import (
    CLUSTER_TRIGGERS,
    QUASI,
    SPAWNS,
    STORED,
    TRANSITIONS,
    EvalStatus,
    EvalTrigger,
    Step,
    next_status,
    transitions_markdown,
)
from herdbook.projector.eval_view import EvalRefused, EvalView, apply_eval, spawn, step

S = EvalStatus

# Every solid arrow of the reference, written out from the diagram.
ARROWS = [
    (S.PENDING, Step.DEQUEUE, S.SCHEDULING),
    (S.PENDING, Step.DELAY, S.DELAYED),
    (S.DELAYED, Step.DEQUEUE, S.SCHEDULING),
    (S.SCHEDULING, Step.REBLOCK, S.BLOCKED),
    (S.BLOCKED, Step.UNBLOCK, S.SCHEDULING),
    (S.SCHEDULING, Step.PLACED, S.COMPLETE),
    (S.SCHEDULING, Step.FAIL, S.FAILED),
    (S.SCHEDULING, Step.CANCEL, S.CANCELED),
    (S.FAILED, Step.RETRY, S.SCHEDULING),
    (S.SCHEDULING, Step.SUBMIT, S.APPLYING),
    (S.APPLYING, Step.PLAN_FAILED, S.SCHEDULING),
    (S.APPLYING, Step.PLACED, S.COMPLETE),
    (S.PENDING, Step.REAP_UNDELIVERABLE, S.FAILED),
    (S.BLOCKED, Step.REAP_DUPLICATE, S.CANCELED),
    (S.CANCELED, Step.GC, S.DELETED),
    (S.FAILED, Step.GC, S.DELETED),
    (S.COMPLETE, Step.GC, S.DELETED),
    (S.PENDING, Step.PLAN_SUBMITTED, S.COMPLETE),
    (S.PENDING, Step.INVALID, S.FAILED),
    (S.PENDING, Step.NO_OP, S.CANCELED),
    (S.FAILED, Step.PLAN_SUBMITTED, S.COMPLETE),
    (S.BLOCKED, Step.NO_OP, S.CANCELED),
    (S.BLOCKED, Step.PLAN_SUBMITTED, S.COMPLETE),
]


def given(status: EvalStatus, eval_id: str = "e1") -> EvalView:
    created = apply_eval(None, EvalCreated(eval_id=eval_id, job_id="train",
                                           triggered_by=EvalTrigger.JOB_REGISTER), 1)
    assert created is not None
    return msgspec.structs.replace(created, status=status)


def test_the_table_is_the_diagram() -> None:
    assert {(a, s): b for a, s, b in ARROWS} == TRANSITIONS


@pytest.mark.parametrize(("src", "how", "dst"), ARROWS,
                         ids=[f"{a}-{s.name}-{b}" for a, s, b in ARROWS])
def test_every_arrow_folds_to_its_target(src: EvalStatus, how: Step, dst: EvalStatus) -> None:
    view = given(src)
    event = step(view, how, "because")
    assert event.status is dst
    after = apply_eval(view, event, 2)
    if dst is EvalStatus.DELETED:   # garbage collection removes it from the view
        assert after is None
        return
    assert after is not None and after.status is dst and after.status_reason == "because"
    assert after.version == 2
    # the broker delivers an eval again exactly after the steps that re-enqueue it
    assert isinstance(event, EvalEnqueued) == (how in (Step.UNBLOCK, Step.RETRY))


REFUSED = [(src, how) for src, how in itertools.product(EvalStatus, Step)
           if (src, how) not in TRANSITIONS]


@pytest.mark.parametrize(("src", "how"), REFUSED)
def test_every_missing_arrow_is_refused(src: EvalStatus, how: Step) -> None:
    assert next_status(src, how) is None
    with pytest.raises(EvalRefused):
        step(given(src), how)


def test_deleted_is_terminal_and_quasi_statuses_are_not_stored() -> None:
    assert all(next_status(S.DELETED, how) is None for how in Step)
    assert QUASI == {S.SCHEDULING, S.APPLYING, S.DELAYED, S.DELETED}
    assert STORED == {S.PENDING, S.BLOCKED, S.COMPLETE, S.FAILED, S.CANCELED}


@pytest.mark.parametrize("trigger", sorted(CLUSTER_TRIGGERS))
def test_cluster_events_create_pending_evals_without_pointers(trigger: EvalTrigger) -> None:
    [created] = spawn(None, trigger, "e9", "train")
    view = apply_eval(None, created, 1)  # type: ignore[arg-type]
    assert view is not None and view.status is S.PENDING and view.triggered_by is trigger
    assert (view.previous_eval, view.next_eval, view.blocked_eval) == (None, None, None)


# (trigger, source status, new status, new.PreviousEval, old.NextEval, old.BlockedEval)
POINTERS = [
    (EvalTrigger.QUEUED_ALLOCS, S.SCHEDULING, S.BLOCKED, "old", None, "new"),
    (EvalTrigger.MAX_PLAN_ATTEMPTS, S.SCHEDULING, S.BLOCKED, "old", None, "new"),
    (EvalTrigger.ROLLING_UPDATE, S.SCHEDULING, S.PENDING, "old", "new", None),
    (EvalTrigger.PREEMPTION, S.APPLYING, S.PENDING, None, None, None),
    (EvalTrigger.DEPLOYMENT_WATCHER, S.COMPLETE, S.PENDING, None, None, None),
    (EvalTrigger.FAILED_FOLLOW_UP, S.FAILED, S.PENDING, "old", "new", None),
]


@pytest.mark.parametrize(("trigger", "source", "status", "previous", "next_", "blocked"),
                         POINTERS, ids=[p[0].value for p in POINTERS])
def test_spawned_evals_set_the_pointers_the_reference_draws(
        trigger: EvalTrigger, source: EvalStatus, status: EvalStatus, previous: str | None,
        next_: str | None, blocked: str | None) -> None:
    old = given(source, "old")
    events = spawn(old, trigger, "new", "train")
    new = apply_eval(None, events[0], 5)
    for event in events[1:]:
        assert isinstance(event, EvalLinked)
        old = apply_eval(old, event, 6)  # type: ignore[assignment]
    assert new is not None and new.status is status and new.triggered_by is trigger
    assert new.previous_eval == previous
    assert old.next_eval == next_ and old.blocked_eval == blocked


def test_a_spawn_from_the_wrong_status_is_refused() -> None:
    with pytest.raises(EvalRefused, match="failed-follow-up eval is spawned from a failed"):
        spawn(given(S.COMPLETE), EvalTrigger.FAILED_FOLLOW_UP, "new", "train")
    assert set(SPAWNS) == {p[0] for p in POINTERS}


def test_a_chain_failed_follow_up_then_blocked_then_complete() -> None:
    """pending -> scheduling -> failed; failed-follow-up -> pending -> scheduling ->
    queued-allocs blocked -> unblocked -> scheduling -> complete."""
    first = given(S.PENDING, "e1")
    for how in (Step.DEQUEUE, Step.FAIL):
        first = apply_eval(first, step(first, how), 2)  # type: ignore[assignment]
    created, link = spawn(first, EvalTrigger.FAILED_FOLLOW_UP, "e2", "train")
    first = apply_eval(first, link, 3)  # type: ignore[arg-type,assignment]
    second = apply_eval(None, created, 4)  # type: ignore[arg-type]
    assert second is not None
    second = apply_eval(second, step(second, Step.DEQUEUE), 5)
    assert second is not None
    blocked_created, blocked_link = spawn(second, EvalTrigger.QUEUED_ALLOCS, "e3", "train")
    second = apply_eval(second, blocked_link, 6)  # type: ignore[arg-type]
    third = apply_eval(None, blocked_created, 7)  # type: ignore[arg-type]
    assert third is not None
    for how in (Step.UNBLOCK, Step.PLACED):
        third = apply_eval(third, step(third, how), 8)
        assert third is not None
    assert (first.next_eval, second.previous_eval) == ("e2", "e1")  # type: ignore[union-attr]
    assert (second.blocked_eval, third.previous_eval) == ("e3", "e2")  # type: ignore[union-attr]
    assert third.status is S.COMPLETE


def test_the_readme_eval_tables_are_the_code() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "jobs.md").read_text()
    assert transitions_markdown() in readme
