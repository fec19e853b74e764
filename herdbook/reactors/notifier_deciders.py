"""The notifier's pure part: which notification a node event calls for (and with what
reason and recommended action), and the decisions the notifier hands the runner when a
notification failed every retry or the workload system reports a node drained. No I/O:
the sending, the retries and the position are ``notifier.py``'s."""

from __future__ import annotations

from herdbook.events.codec import AnyEvent
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import (
    NodeCordoned,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeNotificationFailed,
    NodeUncordoned,
    NodeUndrained,
)
from herdbook.events.states import Health, Intent
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Decision

ACTOR = "notifier"

ACTIONS: dict[type, str] = {NodeCordoned: "cordon", NodeUncordoned: "uncordon",
                            NodeDrainStarted: "drain", NodeUndrained: "undrain"}


def action_for(event: AnyEvent | NodeEvent) -> str | None:
    """Which notification an event calls for, if any. A node the health policy makes
    UNHEALTHY is cordoned in the workload system too (herdbook places nothing on it; Slurm
    or Kubernetes must not either); the operator's ``uncordon`` that clears it uncordons
    it there."""
    if isinstance(event, NodeHealthChanged):
        # a change of its GPUs' verdicts alone (``gpus_only``) changes nothing to say
        return "cordon" if event.health is Health.UNHEALTHY and not event.gpus_only else None
    return ACTIONS.get(type(event))


def reason_for(event: AnyEvent | NodeEvent) -> str:
    reason = str(getattr(event, "reason", ""))
    return f"unhealthy: {reason}" if isinstance(event, NodeHealthChanged) else reason


def recommended_for(event: AnyEvent | NodeEvent) -> str | None:
    """What to do about a health verdict (``health.actions``), sent with the cordon it
    calls for; None for other events and for verdicts written before it was recorded."""
    if isinstance(event, NodeHealthChanged):
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
