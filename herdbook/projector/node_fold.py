"""The node view's pure fold: ``apply(view, event, seq) -> view`` over ``NodeView``
(``projector.node_view``), and ``apply_all`` for a batch.

A view is ``None`` until the node registers and again after ``node.deleted``; each
event sets ``version`` to its stream sequence (the expected version of the node's next
append).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from msgspec.structs import replace

from herdbook.events.breaker_events import NodeActionHeld
from herdbook.events.codec import AnyNodeEvent
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.machine import LifecycleTrigger as Trigger
from herdbook.events.machine import next_lifecycle
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeClaimed,
    NodeConformanceChanged,
    NodeCordoned,
    NodeDeclared,
    NodeDegraded,
    NodeDeleted,
    NodeDisabled,
    NodeDown,
    NodeDrained,
    NodeDrainStarted,
    NodeEnabled,
    NodeFailed,
    NodeInfo,
    NodeInfoUpdated,
    NodeNotificationFailed,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
    NodeReleased,
    NodeTerminated,
    NodeUncordoned,
    NodeUndrained,
    NodeValidated,
    NodeValidationDue,
    NodeValidationFailed,
    NodeValidationStarted,
    NodeWiped,
    NodeWipeFailed,
    NodeWipeStarted,
    NodeWipeStepReported,
)
from herdbook.events.states import (
    Approval,
    Health,
    Intent,
    Lifecycle,
    NodeType,
)
from herdbook.projector.node_view import NodeView

MAX_BOOT_FAILURES = 3
MAX_VALIDATION_FAILURES = 10


def apply(view: NodeView | None, event: AnyNodeEvent, seq: int) -> NodeView | None:
    """Fold one node event. Unknown nodes ignore every event but registration and
    declaration. Events are facts: the fold records them; deciders consulted the
    state machine (``events.machine``) before appending."""
    match event:
        case NodeRegistered():
            return _registered(view, event, seq)
        case NodeDeleted():
            return None
        case NodeDeclared() if view is None:
            return NodeView(
                id=event.node_id, type=NodeType.COMPUTE, approval=Approval.PENDING,
                lifecycle=Lifecycle.UNKNOWN,
                info=NodeInfo(node_class=event.node_class, labels=dict(event.labels)),
                registered_at=event.at, updated_at=event.at, lifecycle_at=event.at,
                lifecycle_reason=event.reason or "declared", last_event=event.event_name,
                version=seq)
    if view is None:
        return None
    one_copy = _ONE_COPY.get(type(event))
    if one_copy is not None:
        return one_copy(view, event, seq)
    view = replace(view, version=seq, updated_at=event.at, last_event=event.event_name)
    match event:
        case NodeBootStarted(trigger=trigger, boot_id=boot_id, reason=reason):
            target = next_lifecycle(view.lifecycle, Trigger(trigger)) or view.lifecycle
            view = _lifecycle(view, target, reason or trigger, event.at, boot_id)
            if event.agent is not None:
                view = replace(view, agent=event.agent)
            return replace(view, boot_failures=0) if trigger == Trigger.REBOOT else view
        case NodeBootChecked(passed=True, checks=checks, boot_id=boot_id):
            target = next_lifecycle(view.lifecycle, Trigger.BOOT_PASSED) or view.lifecycle
            return replace(_lifecycle(view, target, "boot check passed", event.at, boot_id),
                           boot_failures=0, boot_checks=dict(checks))
        case NodeBootChecked(passed=False, checks=checks, boot_id=boot_id):
            failures = view.boot_failures + 1
            failed = [f"{k}: {v}" for k, v in checks.items() if v != "ok"]
            reason = "boot check failed: " + "; ".join(failed)
            target = Lifecycle.FAILED if failures >= MAX_BOOT_FAILURES else view.lifecycle
            if failures >= MAX_BOOT_FAILURES:
                reason = f"{failures} consecutive boot failures; last {reason}"
                view = _returned(view)
            return replace(_lifecycle(view, target, reason, event.at, boot_id),
                           boot_failures=failures, boot_checks=dict(checks))
        case NodeTerminated(reason=reason):
            return _lifecycle(view, Lifecycle.TERMINATED, reason or "instance terminated",
                              event.at, "")
        case NodeNotificationFailed(action=action, reason=reason, attempts=attempts):
            return replace(view, notification_error=f"{action} failed after {attempts} "
                                                    f"attempts: {reason}")
        case NodeFailed(reason=reason):
            return _returned(_lifecycle(view, Lifecycle.FAILED, reason, event.at, ""))
        case NodeUncordoned(reason=reason):
            view = _clear_unhealthy(replace(view, gpus={}))
            if view.intent is Intent.CORDONED:
                view = _intent(view, Intent.ELIGIBLE, event, reason)
            return view
        case NodeDrainStarted(reason=reason, urgent=urgent, deadline_s=deadline_s):
            deadline = None if deadline_s is None else event.at + timedelta(seconds=deadline_s)
            return replace(_intent(view, Intent.DRAINING, event, reason), drain_urgent=urgent,
                           drain_deadline=deadline)
        case NodeDrained(reason=reason):
            return _intent(view, Intent.DRAINED, event, reason)
        case NodeUndrained(reason=reason):
            return replace(_intent(view, Intent.ELIGIBLE, event, reason), drain_urgent=False,
                           drain_deadline=None)
        case NodeDisabled(reason=reason):
            view = _lifecycle(_returned(view), Lifecycle.DOWN, reason or "disabled", event.at,
                              "")
            return _intent(view, Intent.DISABLED, event, reason)
        case NodeEnabled(reason=reason):
            view = _lifecycle(_clear_unhealthy(replace(view, gpus={})), Lifecycle.READY,
                              reason or "enabled",
                              event.at, "")
            return _intent(view, Intent.ELIGIBLE, event, reason)
        case NodeClaimed(user=user, tenant=tenant):
            return replace(view, claimed_by=user, tenant=tenant, claimed_at=event.at)
        case NodeReleased():
            return replace(view, claimed_by=None, tenant="", claimed_at=None,
                           release_pending=True)
        case NodeWipeStarted(attempt=attempt, timeout_s=timeout_s, reason=reason):
            target = next_lifecycle(view.lifecycle, Trigger.WIPE) or view.lifecycle
            return replace(_lifecycle(view, target, reason or "wiping", event.at, ""),
                           wipe_status="wiping", wipe_attempt=attempt, wipe_steps={},
                           wipe_started_at=event.at, wipe_timeout_s=timeout_s,
                           release_pending=False)
        case NodeWipeStepReported(step=name, ok=ok, detail=detail):
            return replace(view, wipe_steps={**view.wipe_steps,
                                             name: "ok" if ok else (detail or "failed")})
        case NodeWiped() | NodeWipeFailed() if view.wipe_status != "wiping":
            return view   # a late word on a wipe already settled (timed out): no effect
        case NodeWiped():
            target = next_lifecycle(view.lifecycle, Trigger.WIPE_PASSED) or view.lifecycle
            view = _lifecycle(view, target, "wiped: back in the pool", event.at, "")
            if view.intent in (Intent.DRAINING, Intent.DRAINED, Intent.CORDONED):
                view = _intent(view, Intent.ELIGIBLE, event, "wiped")
            return replace(view, wipe_status="wiped", claimed_by=None, tenant="",
                           release_pending=False, drain_urgent=False, drain_deadline=None)
        case NodeWipeFailed(reason=reason, step=failed_step):
            target = next_lifecycle(view.lifecycle, Trigger.WIPE_FAILED) or view.lifecycle
            why = f"wipe failed at {failed_step}: {reason}" if failed_step else f"wipe failed: {reason}"
            return replace(_lifecycle(view, target, why, event.at, ""), wipe_status="failed")
        case NodeConformanceChanged(fingerprint=fp, expected=expected, drift=drift):
            return replace(view, fingerprint=fp, fingerprint_expected=expected, drift=drift)
        case NodeActionHeld(kind=kind):
            return replace(view, held=kind.value, held_at=event.at)
        case NodeValidationStarted():
            return replace(view, validation="running", validation_due="",
                           validation_trigger=event.trigger, validation_check=event.check,
                           validation_alloc=event.alloc_id,
                           validation_command=tuple(event.command),
                           validation_started_at=event.at,
                           validation_timeout_s=event.timeout_s, validation_at=None,
                           validation_reason=event.reason or f"{event.check} runs")
        case NodeValidationDue(trigger=trigger):
            return view if view.validation == "running" else replace(view,
                                                                    validation_due=trigger)
        case NodeValidated() | NodeValidationFailed() if (
                view.validation != "running" or view.validation_alloc != event.alloc_id):
            return view   # a late word on a validation already settled: no effect
        case NodeValidated(check=check, duration_s=took):
            return replace(view, validation="passed", validation_at=event.at,
                           validation_reason=f"{check} passed in {took:.0f}s")
        case NodeValidationFailed(reason=reason, quarantine=quarantine):
            failed_at = (*view.validation_failures, event.at)[-MAX_VALIDATION_FAILURES:]
            view = replace(view, validation="failed", validation_at=event.at,
                           validation_reason=reason, validation_failures=failed_at,
                           validation_due="returned", health=Health.UNHEALTHY,
                           health_reason=reason, health_at=event.at, health_level="critical",
                           health_action=event.recommended_action or "")
            quarantined = (next_lifecycle(view.lifecycle, Trigger.QUARANTINE) if quarantine
                           else None)
            return (view if quarantined is None
                    else _lifecycle(view, quarantined, reason, event.at, ""))
    return view


# The events a fleet's log is mostly made of, each folded with one copy of the view and
# its keywords spelled out: a view has ~40 fields and at fleet scale every copy touches
# each field's object (two copies and a ``match`` over the types cost a 10k-node fold
# ~3.0 µs an event, this ~2.3; a dict of changes passed as ``**`` only ~2.9).

def _approval(approval: Approval) -> Callable[[NodeView, Any, int], NodeView]:
    def fold(view: NodeView, event: NodeApproved | NodeRejected, seq: int) -> NodeView:
        if (approval is Approval.APPROVED and view.approval is not Approval.APPROVED
                and not view.validation_due):
            view = replace(view, validation_due="approved")
        return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                       approval=approval, approval_reason=event.reason,
                       approval_actor=event.actor, approval_at=event.at)
    return fold


def _liveness(lifecycle: Lifecycle) -> Callable[[NodeView, Any, int], NodeView]:
    def fold(view: NodeView, event: NodeDegraded | NodeRecovered | NodeDown,
             seq: int) -> NodeView:
        if lifecycle is Lifecycle.DOWN:
            view = _returned(view)
        return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                       lifecycle=lifecycle, lifecycle_reason=event.reason,
                       lifecycle_at=event.at, boot_id=event.boot_id or view.boot_id)
    return fold


def _health_changed(view: NodeView, event: NodeHealthChanged, seq: int) -> NodeView:
    if event.gpus_only:     # a GPU's verdict changed, the node's health did not
        return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                       gpus=event.gpus)
    if event.health is Health.UNHEALTHY and view.validation_due != "returned":
        view = replace(view, validation_due="returned")
    return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                   health=event.health, health_reason=event.reason, health_at=event.at,
                   health_level=event.level or "", gpus=event.gpus,
                   health_action=event.recommended_action or "")


def _info_updated(view: NodeView, event: NodeInfoUpdated, seq: int) -> NodeView:
    return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                   info=event.info)


def _cordoned(view: NodeView, event: NodeCordoned, seq: int) -> NodeView:
    return replace(view, version=seq, updated_at=event.at, last_event=event.event_name,
                   intent=Intent.CORDONED, intent_reason=event.reason,
                   intent_actor=event.actor, intent_at=event.at)


_ONE_COPY: dict[type, Callable[[NodeView, Any, int], NodeView]] = {
    NodeApproved: _approval(Approval.APPROVED), NodeRejected: _approval(Approval.REJECTED),
    NodeDegraded: _liveness(Lifecycle.DEGRADED), NodeRecovered: _liveness(Lifecycle.READY),
    NodeDown: _liveness(Lifecycle.DOWN), NodeHealthChanged: _health_changed,
    NodeInfoUpdated: _info_updated, NodeCordoned: _cordoned,
}


def _returned(view: NodeView) -> NodeView:
    """The node left service (DOWN, FAILED): validated before it is back. A validation
    that ran is interrupted (its allocation is lost with the node)."""
    if view.validation == "running":
        return replace(view, validation="interrupted", validation_due="returned",
                       validation_reason=f"{view.validation_check} interrupted: node left "
                                         "service")
    return view if view.validation_due == "returned" else replace(view,
                                                                   validation_due="returned")


def _intent(view: NodeView, intent: Intent, event: AnyNodeEvent, reason: str) -> NodeView:
    return replace(view, intent=intent, intent_reason=reason, intent_actor=event.actor,
                   intent_at=event.at)


def _clear_unhealthy(view: NodeView) -> NodeView:
    """UNHEALTHY is sticky: only an operator's uncordon or enable clears it. They clear a
    DEGRADED verdict too (one a counter-like fault's hold keeps: ``health.fault_hold``): the
    next report decides again from UNKNOWN, and a hold never makes a node DEGRADED."""
    if view.health in (Health.UNHEALTHY, Health.DEGRADED):
        return replace(view, health=Health.UNKNOWN, health_level="", health_action="")
    return view


def _lifecycle(view: NodeView, lifecycle: Lifecycle, reason: str, at: datetime,
               boot_id: str) -> NodeView:
    return replace(view, lifecycle=lifecycle, lifecycle_reason=reason, lifecycle_at=at,
                   boot_id=boot_id or view.boot_id)


def _registered(view: NodeView | None, event: NodeRegistered, seq: int) -> NodeView:
    if view is None:
        approval = (Approval.APPROVED if event.node_type is NodeType.REQUESTER
                    else Approval.PENDING)
        return NodeView(
            id=event.node_id, type=event.node_type, approval=approval,
            lifecycle=Lifecycle.BOOTING, info=event.info, boot_id=event.boot_id,
            registered_at=event.at, updated_at=event.at, lifecycle_at=event.at,
            lifecycle_reason="registered", last_event=event.event_name, version=seq,
            agent=event.agent,
        )
    # Registering again keeps the approval decision: a REJECTED node stays REJECTED.
    # It keeps the labels too: an agent on a new state dir or a replacement machine adds
    # its own over them and drops none (``node.info_updated`` replaces them: that is an
    # agent whose --labels changed).
    # The agent started: BOOTING, unless the node is beyond that (TERMINATED, ...).
    target = next_lifecycle(view.lifecycle, Trigger.AGENT_STARTED)
    info = event.info
    if view.info.labels:
        info = replace(info, labels={**view.info.labels, **info.labels})
    view = replace(view, type=event.node_type, info=info, updated_at=event.at,
                   last_event=event.event_name, version=seq, agent=event.agent)
    if target is None:
        return view
    return _lifecycle(view, target, "registered again", event.at, event.boot_id)


def apply_all(views: dict[str, NodeView], events: list[tuple[int, AnyNodeEvent]]) -> set[str]:
    """Fold a batch into ``views`` in place; return the ids that changed."""
    changed: set[str] = set()
    for seq, event in events:
        node_id = event.node_id
        new = apply(views.get(node_id), event, seq)
        if new is None:
            views.pop(node_id, None)
        else:
            views[node_id] = new
        changed.add(node_id)
    return changed
