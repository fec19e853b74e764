"""Liveness decider: pure, the clock passed in as a heartbeat age (DESIGN §4).

READY --no heartbeat for heartbeat_timeout--> DEGRADED --grace expired--> DOWN;
DEGRADED --heartbeat resumes within grace--> READY.
"""

from __future__ import annotations

from dataclasses import dataclass

from herdbook.events.node import NodeDegraded, NodeDown, NodeEvent, NodeRecovered
from herdbook.events.states import Lifecycle
from herdbook.projector.node_view import NodeView

ACTOR = "sweeper"


@dataclass(frozen=True)
class Timeouts:
    heartbeat_timeout: float
    grace_period: float


def decide_on_age(view: NodeView, age: float, timeouts: Timeouts) -> list[NodeEvent]:
    """Called when a deadline passes: ``age`` is seconds since the last heartbeat."""
    if view.lifecycle is Lifecycle.READY and age >= timeouts.heartbeat_timeout:
        return [NodeDegraded(node_id=view.id, actor=ACTOR, heartbeat_age=round(age, 3),
                             reason=f"no heartbeat for {age:.1f}s")]
    if (view.lifecycle is Lifecycle.DEGRADED
            and age >= timeouts.heartbeat_timeout + timeouts.grace_period):
        return [NodeDown(node_id=view.id, actor=ACTOR, heartbeat_age=round(age, 3),
                         reason=f"no heartbeat for {age:.1f}s: grace period "
                                f"{timeouts.grace_period:g}s expired")]
    return []


def decide_on_heartbeat(view: NodeView) -> list[NodeEvent]:
    """A fresh heartbeat arrived."""
    if view.lifecycle is Lifecycle.DEGRADED:
        return [NodeRecovered(node_id=view.id, actor=ACTOR,
                              reason="heartbeat resumed within the grace period")]
    return []


def next_deadline(view: NodeView, last_seen: float, timeouts: Timeouts) -> float | None:
    """When ``decide_on_age`` could next produce an event, on the same clock as last_seen."""
    if view.lifecycle is Lifecycle.READY:
        return last_seen + timeouts.heartbeat_timeout
    if view.lifecycle is Lifecycle.DEGRADED:
        return last_seen + timeouts.heartbeat_timeout + timeouts.grace_period
    return None
