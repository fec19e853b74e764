"""The workload system follows the validation gate (``notifier_deciders.action_for`` with
the node's view and the gate): given a node's past events, when one more lands, then this
notification or none. The notifier itself decides from the view right after each event
(a hand-written recording notifier: no process, no socket)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from herdbook.config import ValidationConfig, parse_config
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeDisabled,
    NodeDown,
    NodeEvent,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
    NodeUndrained,
    NodeValidated,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Health
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.notifier_deciders import action_for, reason_for, recommended_for
from tests.fakes import FakeClock, FakeProjector, FakeStore

GATE = ValidationConfig(name="dcgm-diag", command=["dcgmi", "diag"])
RETURNED_ONLY = ValidationConfig(name="burn-in", command=["burn"], when=["returned"])
UNHEALTHY = NodeHealthChanged(node_id="g1", health=Health.UNHEALTHY, level="critical",
                              reason="critical: XID 79", recommended_action="reboot_node")
STARTED = NodeValidationStarted(node_id="g1", trigger="returned", check="dcgm-diag",
                                command=["dcgmi"], timeout_s=60.0, alloc_id="a1")


def ready(*more: NodeEvent) -> list[NodeEvent]:
    return [NodeRegistered(node_id="g1", boot_id="b1", info=NodeInfo()),
            NodeApproved(node_id="g1"), NodeBootChecked(node_id="g1", boot_id="b1", passed=True),
            *more]


def after(events: list[NodeEvent]) -> NodeView:
    """The node's view right after the last of ``events``."""
    view = None
    for seq, event in enumerate(events, 1):
        view = apply(view, event, seq)  # type: ignore[arg-type]
    assert view is not None
    return view


def notified(events: list[NodeEvent], gate: ValidationConfig | None = GATE) -> str | None:
    return action_for(events[-1], after(events), gate)


def test_an_uncordon_of_a_faulted_node_waits_for_its_check() -> None:
    events = ready(UNHEALTHY, NodeUncordoned(node_id="g1", actor="op"))
    assert notified(events) is None                 # the gate validates it first
    assert notified(events, gate=None) == "uncordon"   # no gate: resumed at once
    undrain = ready(UNHEALTHY, NodeUndrained(node_id="g1", actor="op"))
    assert notified(undrain) is None


def test_an_uncordon_the_gate_does_not_hold_is_sent() -> None:
    # cordoned for maintenance, no fault: nothing to validate
    maintenance = ready(NodeCordoned(node_id="g1"), NodeUncordoned(node_id="g1"))
    assert notified(maintenance, RETURNED_ONLY) == "uncordon"
    # a trigger left out of `when` holds nothing either
    approved_only = ValidationConfig(name="c", command=["c"], when=["approved"])
    assert notified(ready(UNHEALTHY, NodeUncordoned(node_id="g1")), approved_only) \
        == "uncordon"


def test_the_check_starting_cordons_and_its_failure_cordons_again() -> None:
    events = ready(UNHEALTHY, NodeUncordoned(node_id="g1"), STARTED)
    assert notified(events) == "cordon"
    assert reason_for(events[-1], after(events)) == "validating: dcgm-diag (returned)"
    failed = NodeValidationFailed(node_id="g1", alloc_id="a1", reason="validation dcgm-diag "
                                  "exited 1: GPU 3 failed", recommended_action="inspect_hardware")
    assert notified([*events, failed]) == "cordon"
    assert reason_for(failed) == "validation dcgm-diag exited 1: GPU 3 failed"
    assert recommended_for(failed) == "inspect_hardware"
    assert recommended_for(STARTED) is None


def test_the_check_passing_resumes_the_node_unless_herdbook_keeps_it_out() -> None:
    passed = NodeValidated(node_id="g1", alloc_id="a1", check="dcgm-diag")
    events = ready(UNHEALTHY, NodeUncordoned(node_id="g1"), STARTED, passed)
    assert notified(events) == "uncordon"
    assert reason_for(passed) == "validated: dcgm-diag passed"
    # `herd node validate` of a node an operator cordoned: it stays cordoned outside too
    on_demand = ready(NodeCordoned(node_id="g1", actor="op"), STARTED, passed)
    assert notified(on_demand) is None


@pytest.mark.parametrize("leave", [NodeDown(node_id="g1", reason="no heartbeat for 30s"),
                                   NodeDisabled(node_id="g1", reason="PDU swap")])
def test_leaving_service_for_a_check_cordons_outside(leave: NodeEvent) -> None:
    events = ready(leave)
    assert notified(events) == "cordon"
    assert reason_for(events[-1], after(events)).startswith("due for validation (returned): ")
    assert notified(events, gate=None) is None       # no gate: liveness is Slurm's own
    never = ValidationConfig(name="c", command=["c"], when=["approved"])
    assert notified(events, never) is None


def test_a_first_approval_cordons_outside_only_where_the_gate_validates_it() -> None:
    events = ready()[:2]       # registered, approved
    assert notified(events) == "cordon"
    assert notified(events, RETURNED_ONLY) is None


class RecordingNotifier(Notifier):
    """The notifier with its sending replaced by a list (unit tests start no process)."""

    def __init__(self, gate: ValidationConfig | None) -> None:
        projector = FakeProjector()
        self.store = FakeStore(projector)
        clock = FakeClock()
        runner = DecideRunner(self.store, projector, clock)  # type: ignore[arg-type]
        config = parse_config("notifier: {type: exec}").notifier
        super().__init__(config, projector, clock=clock,  # type: ignore[arg-type]
                         runner=runner, validation=gate)
        self.calls: list[tuple[str, str | None]] = []

    async def notify(self, action: str, node_id: str, reason: str, **kwargs: Any) -> bool:
        self.calls.append((action, kwargs.get("recommended")))
        return True


async def test_the_notifier_decides_from_the_view_right_after_each_event() -> None:
    notifier = RecordingNotifier(GATE)
    await notifier.start()
    try:
        for event in ready(UNHEALTHY, NodeUncordoned(node_id="g1"), STARTED,
                           NodeValidationFailed(node_id="g1", alloc_id="a1", reason="x",
                                                recommended_action="inspect_hardware")):
            notifier.store.fold(event)
        await asyncio.sleep(0)
        await asyncio.gather(*notifier._tasks)
    finally:
        await notifier.stop()
    # approved (cordoned: due), unhealthy, no uncordon, the check, its failure
    assert notifier.calls == [("cordon", None), ("cordon", "reboot_node"), ("cordon", None),
                              ("cordon", "inspect_hardware")]
    ungated = RecordingNotifier(ValidationConfig())     # an empty command: no gate
    assert ungated.validation is None
