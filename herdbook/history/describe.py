"""How an event reads on the read side: its type, the node it happened on, its reason.
Shared by the cause chains and the audit trail. Pure."""

from __future__ import annotations

from herdbook.events.alloc import AllocEvent
from herdbook.events.codec import AnyEvent, event_tag
from herdbook.events.job_events import JobRegistered
from herdbook.events.node import NodeBootChecked, NodeClaimed, NodeEvent, NodeReleased


def tag(event: AnyEvent) -> str:
    """``node.down``, ``alloc.lost``: the event's type, without the alloc id of a subject."""
    return event_tag(type(event))


def node_of(event: AnyEvent) -> str | None:
    """The node a node or allocation event happened on; None for the others."""
    return event.node_id if isinstance(event, NodeEvent | AllocEvent) else None


def reason_of(event: AnyEvent) -> str:
    """The event's own reason, or what stands for one (a boot check's failed checks, the
    user of a claim, a job's version)."""
    reason = getattr(event, "reason", "")
    if isinstance(reason, str) and reason:
        return reason
    if isinstance(event, NodeBootChecked):
        failed = [f"{k}: {v}" for k, v in event.checks.items() if v != "ok"]
        return "boot check passed" if event.passed else "boot check failed: " + "; ".join(failed)
    if isinstance(event, NodeClaimed | NodeReleased) and event.user:
        return f"user {event.user}"
    if isinstance(event, JobRegistered):
        return f"version {event.version}, count {event.spec.count}"
    return ""
