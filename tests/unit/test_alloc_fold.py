"""The allocation fold: agent facts, stop requests and loss, in any order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from herdbook.events.alloc import (
    TERMINAL,
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocPlaced,
    AllocRunning,
    AllocStatus,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.projector.alloc_view import AllocView, apply_alloc

PLACED = AllocPlaced(node_id="n1", alloc_id="a1", job_id="j", eval_id="e", index=0,
                     command=["true"])


def fold(*events: AllocEvent) -> AllocView | None:
    view: AllocView | None = None
    for seq, event in enumerate((PLACED, *events), start=1):
        view = apply_alloc(view, event, seq)
    return view


def test_placed_then_running_then_complete() -> None:
    view = fold(AllocRunning(node_id="n1", alloc_id="a1", pid=42),
                AllocCompleted(node_id="n1", alloc_id="a1"))
    assert view is not None and view.status is AllocStatus.COMPLETE and view.exit_code == 0
    assert view.pid is None and view.started_at is not None and view.version == 3


def test_a_stop_request_on_a_running_allocation_is_stopping_then_stopped() -> None:
    view = fold(AllocRunning(node_id="n1", alloc_id="a1", pid=42),
                AllocStopRequested(node_id="n1", alloc_id="a1", reason="drain", migrate=True))
    assert view is not None and (view.status, view.desired, view.migrate) == (
        AllocStatus.STOPPING, "stop", True)
    view = fold(AllocRunning(node_id="n1", alloc_id="a1", pid=42),
                AllocStopRequested(node_id="n1", alloc_id="a1", reason="drain"),
                AllocStopped(node_id="n1", alloc_id="a1", exit_code=143))
    assert view is not None and view.status is AllocStatus.STOPPED and view.exit_code == 143
    assert view.status_reason == "drain"


def test_lost_stays_lost_whatever_the_agent_says_later() -> None:
    view = fold(AllocRunning(node_id="n1", alloc_id="a1", pid=42),
                AllocLost(node_id="n1", alloc_id="a1", reason="node down",
                          requeue_allowed=False),
                AllocCompleted(node_id="n1", alloc_id="a1"),
                AllocRunning(node_id="n1", alloc_id="a1", pid=43))
    assert view is not None and view.status is AllocStatus.LOST and not view.requeue_allowed


def test_the_first_terminal_fact_wins() -> None:
    view = fold(AllocFailed(node_id="n1", alloc_id="a1", exit_code=3),
                AllocCompleted(node_id="n1", alloc_id="a1"))
    assert view is not None and view.status is AllocStatus.FAILED and view.exit_code == 3
    assert view.status_reason == "exit 3"


def test_events_for_an_unknown_allocation_change_nothing() -> None:
    assert apply_alloc(None, AllocRunning(node_id="n1", alloc_id="zz", pid=1), 1) is None


FACTS = st.sampled_from([
    AllocRunning(node_id="n1", alloc_id="a1", pid=42),
    AllocCompleted(node_id="n1", alloc_id="a1"),
    AllocFailed(node_id="n1", alloc_id="a1", exit_code=1),
    AllocStopRequested(node_id="n1", alloc_id="a1"),
    AllocStopped(node_id="n1", alloc_id="a1"),
    AllocLost(node_id="n1", alloc_id="a1"),
    PLACED,
])


@given(st.lists(FACTS, max_size=12))
def test_no_history_crashes_the_fold_and_terminal_is_final(events: list[AllocEvent]) -> None:
    view: AllocView | None = apply_alloc(None, PLACED, 1)
    first_terminal = None
    for seq, event in enumerate(events, start=2):
        view = apply_alloc(view, event, seq)
        assert view is not None and view.version == seq
        if first_terminal is None and view.status in TERMINAL:
            first_terminal = view.status
        if first_terminal is not None:
            assert view.status is first_terminal
