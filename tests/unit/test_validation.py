"""The validation gate's pure half (``reactors/validation_deciders.py``) and its fold: when a node
is due, what an operator's request is refused for, the exclusive placement, how the
check's end decides, quarantine through the breaker, the timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from msgspec.structs import replace

from herdbook.config import ValidationConfig, parse_config
from herdbook.events.alloc import VALIDATION_JOB, AllocPlaced, AllocStatus
from herdbook.events.breaker_events import HeldAction, NodeActionHeld
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeDown,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
    NodeValidated,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Health, Lifecycle
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Context
from herdbook.reactors.placement import capacities
from herdbook.reactors.refused import AlreadyDone, CommandRefused
from herdbook.reactors.validation_deciders import (
    decide_due,
    decide_place,
    decide_result,
    decide_timeout,
    decide_validate_request,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CHECK = ValidationConfig(name="dcgm-diag", command=["dcgmi", "diag", "-r", "2"], timeout=600.0)


def ctx(at: datetime = T0) -> Context:
    ids = iter(f"id{n:030d}" for n in range(1000))
    return Context(now=at, new_id=lambda: next(ids))


def fold(*events: object) -> NodeView:
    view = None
    for seq, event in enumerate(events, 1):
        view = apply(view, event, seq)  # type: ignore[arg-type]
    assert view is not None
    return view


def ready(approved: bool = True) -> NodeView:
    info = NodeInfo(cpus=16, memory_bytes=64 * 2**30,
                    gpus=tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="H100") for i in range(8)))
    events: list[object] = [NodeRegistered(node_id="g1", boot_id="b1", info=info)]
    if approved:
        events.append(NodeApproved(node_id="g1"))
    events.append(NodeBootChecked(node_id="g1", boot_id="b1", passed=True))
    return fold(*events)


def then(view: NodeView, event: object, at: datetime = T0) -> NodeView:
    """Fold ``event`` as the runner appends it: stamped with the decision's time."""
    after = apply(view, replace(event, at=at), view.version + 1)  # type: ignore[type-var,arg-type]
    assert after is not None
    return after


def started(view: NodeView, at: datetime = T0) -> NodeView:
    decision = decide_due(view, CHECK, ctx(at))
    assert decision is not None
    return then(view, decision.events[0], at)


def test_first_approval_makes_a_ready_node_due_and_validating() -> None:
    view = ready()
    assert view.validation_due == "approved" and view.schedulable
    after = started(view)
    assert after.state == "VALIDATING" and not after.schedulable
    assert after.validation == "running" and after.validation_due == ""
    assert after.validation_command == ("dcgmi", "diag", "-r", "2")


def test_no_gate_configured_starts_nothing() -> None:
    assert decide_due(ready(), None, ctx()) is None
    assert not parse_config(b"").validation.enabled


def test_a_trigger_left_out_of_when_starts_nothing() -> None:
    assert decide_due(ready(), replace(CHECK, when=["returned"]), ctx()) is None


@pytest.mark.parametrize("leave", [
    NodeDown(node_id="g1", reason="no heartbeat"),
    NodeHealthChanged(node_id="g1", health=Health.UNHEALTHY, reason="Xid 79"),
])
def test_a_node_back_from_down_or_unhealthy_is_due(leave: object) -> None:
    view = fold(NodeRegistered(node_id="g1", boot_id="b1"), NodeApproved(node_id="g1"),
                NodeBootChecked(node_id="g1", boot_id="b1", passed=True))
    view = started(view)
    view = apply(view, NodeValidated(node_id="g1", alloc_id=view.validation_alloc),
                 view.version + 1)  # type: ignore[assignment]
    assert view is not None and view.validation_due == ""
    view = apply(view, leave, view.version + 1)  # type: ignore[arg-type,assignment]
    assert view is not None and view.validation_due == "returned"
    assert decide_due(view, CHECK, ctx()) is None   # not READY / UNHEALTHY: not yet
    back = (NodeBootStarted(node_id="g1", boot_id="b2"),
            NodeBootChecked(node_id="g1", boot_id="b2", passed=True)) \
        if isinstance(leave, NodeDown) else (NodeUncordoned(node_id="g1"),)
    for event in back:
        view = apply(view, event, view.version + 1)  # type: ignore[arg-type,assignment]
    assert view is not None and view.state == "READY"
    decision = decide_due(view, CHECK, ctx())
    assert decision is not None
    assert decision.events[0].trigger == "returned"  # type: ignore[attr-defined]


def test_a_node_due_takes_no_work_from_the_scheduler() -> None:
    view = ready()
    assert [c.node_id for c in capacities([view], [])] == ["g1"]
    assert capacities([view], [], frozenset({"approved"})) == []


def test_going_down_interrupts_a_validation_and_makes_it_due_again() -> None:
    view = started(ready())
    view = apply(view, NodeDown(node_id="g1"), view.version + 1)  # type: ignore[assignment]
    assert view is not None
    assert view.validation == "interrupted" and view.validation_due == "returned"


def alloc(view: NodeView, status: AllocStatus, code: int | None = None,
          output: str = "", at: datetime = T0) -> AllocView:
    return AllocView(id=view.validation_alloc, job_id=VALIDATION_JOB, node_id="g1",
                     eval_id="", index=0, command=list(view.validation_command),
                     status=status, exit_code=code, output=output, created_at=at,
                     status_reason=f"exit {code}")


def test_the_check_is_placed_alone_with_every_gpu() -> None:
    view = started(ready())
    other = AllocView(id="a-1", job_id="train", node_id="g1", eval_id="e", index=0,
                      command=["sleep"], status=AllocStatus.RUNNING)
    assert decide_place(view, [other], 7) is None    # waits for the node to be free
    decision = decide_place(view, [replace(other, status=AllocStatus.COMPLETE)], 7)
    assert decision is not None and decision.expected == 7
    [placed] = decision.events
    assert isinstance(placed, AllocPlaced)
    assert placed.job_id == VALIDATION_JOB and placed.alloc_id == view.validation_alloc
    assert placed.resources.gpus == 8 and placed.resources.cpu == 16
    assert decide_place(view, [alloc(view, AllocStatus.PENDING)], 8) is None   # placed once


def test_exit_0_validates_the_node_back_into_service() -> None:
    view = started(ready())
    decision = decide_result(view, alloc(view, AllocStatus.COMPLETE, 0, "Pass\n"), CHECK,
                             ctx(T0 + timedelta(seconds=90)))
    assert decision is not None
    [event] = decision.events
    assert isinstance(event, NodeValidated) and event.duration_s == 90 and event.output == "Pass\n"
    after = then(view, event)
    assert after.state == "READY" and after.schedulable


def test_a_failed_check_is_unhealthy_with_its_last_line_as_the_reason() -> None:
    view = started(ready())
    decision = decide_result(view, alloc(view, AllocStatus.FAILED, 1,
                                         "run 1/3\nGPU 3: Fail - PCIe replay\n\n"), CHECK, ctx())
    assert decision is not None
    [event] = decision.events
    assert isinstance(event, NodeValidationFailed)
    assert event.reason == "validation dcgm-diag exited 1: GPU 3: Fail - PCIe replay"
    assert event.failures == 1 and not event.quarantine
    after = apply(view, event, view.version + 1)
    assert after is not None and after.state == "UNHEALTHY" and not after.schedulable
    assert after.health_reason == event.reason and after.validation_due == "returned"


def failed_twice(gate: object = None, gap: timedelta = timedelta(hours=1)) -> list[object]:
    view = started(ready())
    first = decide_result(view, alloc(view, AllocStatus.FAILED, 1), CHECK, ctx())
    assert first is not None
    view = then(view, first.events[0])
    view = then(view, NodeUncordoned(node_id="g1"), T0 + gap)
    later = ctx(T0 + gap)
    view = started(view, T0 + gap)
    second = decide_result(view, alloc(view, AllocStatus.FAILED, 1), CHECK, later,
                           gate)  # type: ignore[arg-type]
    assert second is not None
    return [view, *second.events]


def test_the_second_failure_within_the_window_quarantines() -> None:
    view, event = failed_twice()
    assert isinstance(event, NodeValidationFailed) and event.failures == 2 and event.quarantine
    after = apply(view, event, view.version + 1)  # type: ignore[arg-type]
    assert after is not None and after.lifecycle is Lifecycle.QUARANTINED
    assert after.state == "QUARANTINED"


def test_failures_outside_the_window_do_not_add_up() -> None:
    _, event = failed_twice(gap=timedelta(days=2))
    assert isinstance(event, NodeValidationFailed)
    assert event.failures == 1 and not event.quarantine


def test_the_breaker_can_hold_the_quarantine_but_the_node_stays_out() -> None:
    def gate(view: NodeView, kind: HeldAction, would: str) -> list[NodeActionHeld]:
        return [NodeActionHeld(node_id=view.id, kind=kind, would=would, reason="breaker open")]

    view, event, held = failed_twice(gate)
    assert isinstance(event, NodeValidationFailed) and not event.quarantine
    assert isinstance(held, NodeActionHeld) and held.kind is HeldAction.QUARANTINE
    after = apply(view, event, view.version + 1)  # type: ignore[arg-type]
    assert after is not None and after.state == "UNHEALTHY"


def test_a_check_still_running_at_its_timeout_fails() -> None:
    view = started(ready())
    running = alloc(view, AllocStatus.RUNNING)
    assert decide_timeout(view, running, CHECK, ctx(T0 + timedelta(seconds=599))) is None
    decision = decide_timeout(view, running, CHECK, ctx(T0 + timedelta(seconds=600)))
    assert decision is not None
    [event] = decision.events
    assert isinstance(event, NodeValidationFailed)
    assert "did not finish within 600s" in event.reason


def test_a_late_word_on_a_settled_validation_changes_nothing() -> None:
    view = started(ready())
    stale = apply(view, NodeValidated(node_id="g1", alloc_id="another"), view.version + 1)
    assert stale is not None and stale.validation == "running"
    assert decide_result(view, replace(alloc(view, AllocStatus.COMPLETE, 0), id="another"),
                         CHECK, ctx()) is None


def test_an_operator_request_is_refused_where_the_check_cannot_run() -> None:
    view = ready()
    with pytest.raises(CommandRefused, match="no validation check is configured"):
        decide_validate_request(view, None, 0, "ana", "", ctx())
    with pytest.raises(CommandRefused, match="1 allocation"):
        decide_validate_request(view, CHECK, 1, "ana", "", ctx())
    unhealthy = replace(view, health=Health.UNHEALTHY)
    with pytest.raises(CommandRefused, match="uncordon"):
        decide_validate_request(unhealthy, CHECK, 0, "ana", "", ctx())
    with pytest.raises(CommandRefused, match="PENDING"):
        decide_validate_request(ready(approved=False), CHECK, 0, "ana", "", ctx())
    with pytest.raises(AlreadyDone):
        decide_validate_request(started(view), CHECK, 0, "ana", "", ctx())
    decision = decide_validate_request(view, CHECK, 0, "ana", "PDU swap", ctx())
    [event] = decision.events
    assert isinstance(event, NodeValidationStarted)
    assert (event.trigger, event.actor, event.reason) == ("operator", "ana", "PDU swap")


def test_the_config_refuses_a_bad_gate() -> None:
    from herdbook.config import ConfigError
    for bad, why in [("validation: {command: [x], when: [boot]}", "validation.when"),
                     ("validation: {command: [x], timeout: 0}", "validation.timeout"),
                     ("validation: {command: ['']}", "validation.command"),
                     ("validation: {command: [x], quarantine_after: -1}", "quarantine_after")]:
        with pytest.raises(ConfigError, match=why):
            parse_config(bad)
