"""Liveness decider: pure, the clock passed in as a heartbeat age (DESIGN §4).

READY --no heartbeat for heartbeat_timeout--> DEGRADED --grace expired--> DOWN;
DEGRADED --heartbeat resumes within grace--> READY;
DOWN --heartbeat of a new boot (the agent restarted)--> READY. A DOWN node whose
heartbeats resume from the same boot (a healed partition) stays DOWN, unless
``recover_down_on_heartbeat``.
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


def decide_on_age(view: NodeView, age: float, timeouts: Timeouts,
                  boot_id: str = "") -> list[NodeEvent]:
    """Called when a deadline passes: ``age`` is seconds since the last heartbeat, whose
    boot was ``boot_id`` (empty if none was seen)."""
    if view.lifecycle is Lifecycle.READY and age >= timeouts.heartbeat_timeout:
        return [NodeDegraded(node_id=view.id, actor=ACTOR, heartbeat_age=round(age, 3),
                             reason=f"no heartbeat for {age:.1f}s", boot_id=boot_id)]
    if (view.lifecycle is Lifecycle.DEGRADED
            and age >= timeouts.heartbeat_timeout + timeouts.grace_period):
        return [NodeDown(node_id=view.id, actor=ACTOR, heartbeat_age=round(age, 3),
                         reason=f"no heartbeat for {age:.1f}s: grace period "
                                f"{timeouts.grace_period:g}s expired", boot_id=boot_id)]
    return []


def decide_on_heartbeat(view: NodeView, boot_id: str | None = None,
                        recover_down_on_heartbeat: bool = False) -> list[NodeEvent]:
    """A fresh heartbeat of boot ``boot_id`` arrived (None: boot unknown)."""
    if view.lifecycle is Lifecycle.DEGRADED:
        return [NodeRecovered(node_id=view.id, actor=ACTOR, boot_id=boot_id or "",
                              reason="heartbeat resumed within the grace period")]
    if view.lifecycle is Lifecycle.DOWN and boot_id:
        if boot_id != view.boot_id:
            return [NodeRecovered(node_id=view.id, actor=ACTOR, boot_id=boot_id,
                                  reason="agent restarted (new boot id)")]
        if recover_down_on_heartbeat:
            return [NodeRecovered(node_id=view.id, actor=ACTOR, boot_id=boot_id,
                                  reason="heartbeat resumed "
                                         "(lifecycle.recover_down_on_heartbeat)")]
    return []


def next_deadline(view: NodeView, last_seen: float, timeouts: Timeouts) -> float | None:
    """When ``decide_on_age`` could next produce an event, on the same clock as last_seen."""
    if view.lifecycle is Lifecycle.READY:
        return last_seen + timeouts.heartbeat_timeout
    if view.lifecycle is Lifecycle.DEGRADED:
        return last_seen + timeouts.heartbeat_timeout + timeouts.grace_period
    return None
