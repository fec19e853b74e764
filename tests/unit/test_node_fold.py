"""The node fold, given / when / then: given past events, when one more, then this view."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from herdbook.events.codec import AnyEvent
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeDeclared,
    NodeDegraded,
    NodeDeleted,
    NodeDisabled,
    NodeDown,
    NodeDrainStarted,
    NodeEnabled,
    NodeInfo,
    NodeInfoUpdated,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
)
from herdbook.events.states import Approval, Health, Lifecycle, NodeClass, NodeType
from herdbook.projector.node_fold import apply, apply_all
from herdbook.projector.node_view import NodeView

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def given(*events: AnyEvent) -> NodeView | None:
    """Fold past events at sequences 1, 2, 3, ..."""
    view: NodeView | None = None
    for seq, event in enumerate(events, start=1):
        view = apply(view, event, seq)
    return view


def when(view: NodeView | None, event: AnyEvent, seq: int) -> NodeView | None:
    return apply(view, event, seq)


def registered(node_id: str = "gpu-017", **kw: object) -> NodeRegistered:
    return NodeRegistered(node_id=node_id, boot_id="boot-1", at=at(0), **kw)  # type: ignore[arg-type]


def ready_view() -> NodeView:
    view = given(registered())
    assert view is not None
    return view


# registration ---------------------------------------------------------------------


def test_a_compute_node_registers_pending_and_ready() -> None:
    # given nothing, when a compute node registers
    info = NodeInfo(hostname="gpu-017", cpus=64, node_class=NodeClass.BORROWED)
    then = when(None, registered(info=info), 7)
    # then it is a PENDING compute node, BOOTING until its boot check, at the registration's
    # sequence
    assert then is not None
    assert then.id == "gpu-017"
    assert then.type is NodeType.COMPUTE
    assert then.approval is Approval.PENDING
    assert then.lifecycle is Lifecycle.BOOTING
    assert then.info == info
    assert then.boot_id == "boot-1"
    assert then.registered_at == at(0)
    assert then.last_event == "registered"
    assert then.version == 7
    assert not then.schedulable


def test_a_requester_node_registers_approved() -> None:
    then = when(None, registered(node_type=NodeType.REQUESTER), 1)
    assert then is not None
    assert then.type is NodeType.REQUESTER
    assert then.approval is Approval.APPROVED
    assert not then.schedulable   # BOOTING
    booted = when(then, NodeBootChecked(node_id="gpu-017", passed=True), 2)
    assert booted is not None and booted.schedulable


# approval -------------------------------------------------------------------------


def test_approve_stores_reason_and_actor() -> None:
    # given a pending node that booted
    view = given(registered(), NodeBootChecked(node_id="gpu-017", passed=True))
    # when an operator approves it
    then = when(view, NodeApproved(node_id="gpu-017", actor="alice", reason="racked",
                                   at=at(5)), 2)
    # then it is approved, with who, why and when
    assert then is not None
    assert then.approval is Approval.APPROVED
    assert then.approval_actor == "alice"
    assert then.approval_reason == "racked"
    assert then.approval_at == at(5)
    assert then.schedulable


def test_reject_stores_reason_and_actor() -> None:
    view = given(registered())
    then = when(view, NodeRejected(node_id="gpu-017", actor="bob", reason="unknown host",
                                   at=at(6)), 2)
    assert then is not None
    assert then.approval is Approval.REJECTED
    assert then.approval_actor == "bob"
    assert then.approval_reason == "unknown host"
    assert then.approval_at == at(6)
    assert not then.schedulable


def test_a_rejected_node_stays_rejected_when_it_registers_again() -> None:
    # given a rejected node
    view = given(registered(), NodeRejected(node_id="gpu-017", actor="bob", reason="no"))
    # when it registers again (new boot)
    then = when(view, NodeRegistered(node_id="gpu-017", boot_id="boot-2", at=at(60)), 3)
    # then it is still rejected, with the original decision, but the new boot
    assert then is not None
    assert then.approval is Approval.REJECTED
    assert then.approval_actor == "bob"
    assert then.approval_reason == "no"
    assert then.boot_id == "boot-2"
    assert then.registered_at == at(0)
    assert then.version == 3


def test_an_approved_node_stays_approved_when_it_registers_again() -> None:
    view = given(registered(), NodeApproved(node_id="gpu-017"),
                 NodeDegraded(node_id="gpu-017", heartbeat_age=31.0),
                 NodeDown(node_id="gpu-017"))
    then = when(view, NodeRegistered(node_id="gpu-017", boot_id="boot-2"), 5)
    assert then is not None
    assert then.approval is Approval.APPROVED
    assert then.lifecycle is Lifecycle.BOOTING   # DOWN -> BOOTING: the agent started again
    assert then.lifecycle_reason == "registered again"


def test_delete_removes_the_node_and_it_registers_again_as_pending() -> None:
    # given an approved node
    view = given(registered(), NodeApproved(node_id="gpu-017", actor="alice"))
    # when it is deleted
    deleted = when(view, NodeDeleted(node_id="gpu-017", reason="decommissioned"), 3)
    # then it is gone
    assert deleted is None
    # and when it registers again, it starts over: PENDING, no old decision
    again = when(deleted, NodeRegistered(node_id="gpu-017", boot_id="boot-9", at=at(99)), 4)
    assert again is not None
    assert again.approval is Approval.PENDING
    assert again.approval_actor == ""
    assert again.registered_at == at(99)
    assert again.version == 4


def test_info_updated_replaces_the_info() -> None:
    view = given(registered(info=NodeInfo(hostname="old")))
    info = NodeInfo(hostname="new", labels={"rack": "4"})
    then = when(view, NodeInfoUpdated(node_id="gpu-017", info=info), 2)
    assert then is not None
    assert then.info == info
    assert then.approval is Approval.PENDING


# liveness -------------------------------------------------------------------------


def test_degraded_recovered_down_set_the_lifecycle() -> None:
    view = ready_view()
    # when degraded
    degraded = when(view, NodeDegraded(node_id="gpu-017", heartbeat_age=30.2,
                                       reason="no heartbeat for 30.2s", at=at(31)), 2)
    assert degraded is not None
    assert degraded.lifecycle is Lifecycle.DEGRADED
    assert degraded.lifecycle_reason == "no heartbeat for 30.2s"
    assert degraded.lifecycle_at == at(31)
    assert degraded.state == "DEGRADED"
    # when recovered
    recovered = when(degraded, NodeRecovered(node_id="gpu-017", reason="back", at=at(40)), 3)
    assert recovered is not None
    assert recovered.lifecycle is Lifecycle.READY
    assert recovered.lifecycle_reason == "back"
    assert recovered.lifecycle_at == at(40)
    # when down
    down = when(recovered, NodeDown(node_id="gpu-017", reason="grace expired", at=at(130)), 4)
    assert down is not None
    assert down.lifecycle is Lifecycle.DOWN
    assert down.lifecycle_reason == "grace expired"
    assert down.state == "DOWN"
    assert down.version == 4


def test_liveness_keeps_the_approval() -> None:
    view = given(registered(), NodeApproved(node_id="gpu-017"))
    then = when(view, NodeDown(node_id="gpu-017"), 3)
    assert then is not None
    assert then.approval is Approval.APPROVED
    assert not then.schedulable


# unknown nodes, versions ----------------------------------------------------------


def test_events_for_unknown_nodes_are_ignored() -> None:
    for event in (NodeApproved(node_id="ghost"), NodeRejected(node_id="ghost"),
                  NodeInfoUpdated(node_id="ghost", info=NodeInfo()),
                  NodeDegraded(node_id="ghost", heartbeat_age=40.0),
                  NodeRecovered(node_id="ghost"), NodeDown(node_id="ghost"),
                  NodeDeleted(node_id="ghost")):
        assert when(None, event, 5) is None


def test_events_after_delete_are_ignored() -> None:
    view = given(registered(), NodeDeleted(node_id="gpu-017"),
                 NodeApproved(node_id="gpu-017"))
    assert view is None


def test_version_is_the_sequence_passed() -> None:
    view = ready_view()
    for seq, event in [(10, NodeApproved(node_id="gpu-017")),
                       (11, NodeDegraded(node_id="gpu-017", heartbeat_age=30.0)),
                       (250, NodeRecovered(node_id="gpu-017")),
                       (251, NodeInfoUpdated(node_id="gpu-017", info=NodeInfo())),
                       (9000, NodeRegistered(node_id="gpu-017"))]:
        view = when(view, event, seq)
        assert view is not None
        assert view.version == seq
        assert view.last_event == event.event_name
        assert view.updated_at == event.at


def test_apply_all_folds_a_batch_in_place_and_names_the_changed_nodes() -> None:
    # given one known node
    views = {"gpu-017": ready_view()}
    # when a batch approves it, registers b, deletes it and approves an unknown c
    changed = apply_all(views, [
        (2, NodeApproved(node_id="gpu-017")),
        (3, NodeRegistered(node_id="b")),
        (4, NodeDeleted(node_id="gpu-017")),
        (5, NodeApproved(node_id="c")),
    ])
    # then only b is left, and every touched id is reported for the writer
    assert set(views) == {"b"}
    assert views["b"].version == 3
    assert changed == {"gpu-017", "b", "c"}


# boot ------------------------------------------------------------------------------


def test_three_consecutive_boot_failures_fail_the_node_and_a_pass_resets_the_count() -> None:
    fail = NodeBootChecked(node_id="gpu-017", passed=False, checks={"nvml": "NVML call failed"})
    view = given(registered(), fail)
    assert view is not None and view.lifecycle is Lifecycle.BOOTING and view.boot_failures == 1
    view = when(view, NodeBootChecked(node_id="gpu-017", passed=True), 3)
    assert view is not None and view.lifecycle is Lifecycle.READY and view.boot_failures == 0
    view = given(registered(), fail, fail, fail)
    assert view is not None and view.lifecycle is Lifecycle.FAILED
    assert "3 consecutive boot failures" in view.lifecycle_reason


def test_a_reboot_takes_a_failed_node_back_to_booting() -> None:
    fail = NodeBootChecked(node_id="gpu-017", passed=False)
    view = given(registered(), fail, fail, fail,
                 NodeBootStarted(node_id="gpu-017", trigger="reboot"))
    assert view is not None and view.lifecycle is Lifecycle.BOOTING and view.boot_failures == 0


def test_a_declared_node_is_unknown_until_its_agent_registers() -> None:
    view = given(NodeDeclared(node_id="gpu-017", labels={"rack": "7"}))
    assert view is not None and view.lifecycle is Lifecycle.UNKNOWN
    assert view.info.labels == {"rack": "7"}
    view = when(view, registered(), 2)
    assert view is not None and view.lifecycle is Lifecycle.BOOTING


def test_draining_survives_degraded_and_recovery() -> None:
    view = given(registered(), NodeBootChecked(node_id="gpu-017", passed=True),
                 NodeDrainStarted(node_id="gpu-017", urgent=True, deadline_s=60),
                 NodeDegraded(node_id="gpu-017", heartbeat_age=31.0),
                 NodeRecovered(node_id="gpu-017"))
    assert view is not None and view.lifecycle is Lifecycle.READY
    assert view.state == "DRAINING" and view.drain_urgent and view.drain_deadline is not None


def test_disable_and_enable_clear_unhealthy() -> None:
    view = given(registered(), NodeBootChecked(node_id="gpu-017", passed=True))
    assert view is not None
    view = msgspec.structs.replace(view, health=Health.UNHEALTHY)
    view = when(view, NodeDisabled(node_id="gpu-017"), 5)
    assert view is not None and view.state == "DOWN" and view.intent.value == "DISABLED"
    view = when(view, NodeEnabled(node_id="gpu-017"), 6)
    assert view is not None and view.state == "READY" and view.health is Health.UNKNOWN
