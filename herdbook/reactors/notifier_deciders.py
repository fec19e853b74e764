"""The notifier's pure part: which notification a node event calls for (and with what
reason and recommended action), and the decisions the notifier hands the runner when a
notification failed every retry or the workload system reports a node drained. No I/O:
the sending, the retries and the position are ``notifier.py``'s.

With the validation gate on (docs/remediation.md#validation) the workload system follows
it: a node leaving service for a reason the gate validates (DOWN, FAILED, disabled, its
first approval) and a node whose check starts are cordoned there; an uncordon or undrain
of a node the gate still holds (due for a check, or VALIDATING) is not sent; the check's
failure cordons it again (with its recommended action) and its pass uncordons it, unless
herdbook itself still keeps it out (cordoned, draining, drained, disabled, UNHEALTHY)."""

from __future__ import annotations

from herdbook.config import ValidationConfig
from herdbook.events.codec import AnyEvent
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import (
    NodeApproved,
    NodeCordoned,
    NodeDisabled,
    NodeDown,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeFailed,
    NodeNotificationFailed,
    NodeUncordoned,
    NodeUndrained,
    NodeValidated,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Health, Intent
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Decision

ACTOR = "notifier"

ACTIONS: dict[type, str] = {NodeCordoned: "cordon", NodeUncordoned: "uncordon",
                            NodeDrainStarted: "drain", NodeUndrained: "undrain"}


LEAVING = (NodeDown, NodeFailed, NodeDisabled, NodeApproved)
"""Events after which a node may be due for the gate's check (``node_fold._returned``,
first approval): cordoned outside when it is, so that it waits there too."""


def gated(view: NodeView | None, validation: ValidationConfig | None) -> bool:
    """The gate holds the node: its check runs, or it is due for one by a trigger of
    ``validation.when`` (back in service only at ``node.validated``)."""
    return (validation is not None and view is not None
            and (view.validation == "running" or view.validation_due in validation.when))


def _kept_out(view: NodeView | None) -> bool:
    """herdbook keeps the node out for a reason of its own besides the gate."""
    return view is not None and (view.intent is not Intent.ELIGIBLE
                                 or view.health is Health.UNHEALTHY)


def action_for(event: AnyEvent | NodeEvent, view: NodeView | None = None,
               validation: ValidationConfig | None = None) -> str | None:
    """Which notification an event calls for, if any, given the node's ``view`` after it
    and the validation gate (None: off). A node the health policy makes UNHEALTHY is
    cordoned in the workload system too (herdbook places nothing on it; Slurm or
    Kubernetes must not either); the operator's ``uncordon`` that clears it uncordons it
    there, unless the gate validates it first: then ``node.validated`` does."""
    match event:
        case NodeHealthChanged():
            # a change of its GPUs' verdicts alone (``gpus_only``) changes nothing to say
            return ("cordon" if event.health is Health.UNHEALTHY and not event.gpus_only
                    else None)
        case NodeValidationStarted() | NodeValidationFailed():
            return "cordon"
        case NodeValidated():
            return None if _kept_out(view) or gated(view, validation) else "uncordon"
        case NodeUncordoned() | NodeUndrained() if gated(view, validation):
            return None
        case NodeDown() | NodeFailed() | NodeDisabled() | NodeApproved():
            return "cordon" if gated(view, validation) else None
    return ACTIONS.get(type(event))


def reason_for(event: AnyEvent | NodeEvent, view: NodeView | None = None) -> str:
    match event:
        case NodeHealthChanged(reason=reason):
            return f"unhealthy: {reason}"
        case NodeValidationStarted(check=check, trigger=trigger):
            return f"validating: {check} ({trigger})"
        case NodeValidated(check=check):
            return f"validated: {check} passed"
        case NodeDown() | NodeFailed() | NodeDisabled() | NodeApproved():
            due = view.validation_due if view is not None else ""
            why = str(getattr(event, "reason", "")) or event.event_name
            return f"due for validation ({due}): {why}"
    return str(getattr(event, "reason", ""))


def recommended_for(event: AnyEvent | NodeEvent) -> str | None:
    """What to do about a health verdict or a failed validation (``health.actions``), sent
    with the cordon it calls for; None for other events and for verdicts written before
    it was recorded."""
    if isinstance(event, NodeHealthChanged | NodeValidationFailed):
        return event.recommended_action
    return None


def decide_failed(view: NodeView | None, action: str, error: str,
                  attempts: int) -> Decision[NodeEvent] | None:
    """A notification failed every attempt: recorded on the node, if it still exists."""
    if view is None:
        return None
    return Decision(view.version, [NodeNotificationFailed(
        node_id=view.id, action=action, reason=error[:500], attempts=attempts, actor=ACTOR)])


def decide_drained(view: NodeView | None, message: str) -> Decision[NodeEvent] | None:
    """The workload system reports the node drained: DRAINED, if it is still draining."""
    if view is None or view.intent is not Intent.DRAINING:
        return None
    return Decision(view.version, [NodeDrained(
        node_id=view.id, actor=ACTOR,
        reason=message or "the workload system reports it drained")])
