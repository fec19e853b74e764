"""Liveness decider: pure, the clock passed in as a heartbeat age (DESIGN §4).

READY --no heartbeat for heartbeat_timeout--> DEGRADED --grace expired--> DOWN;
DEGRADED --heartbeat resumes within grace--> READY;
BOOTING --longer than boot_timeout--> FAILED; DRAINING --no running allocation--> DRAINED.
A DOWN node whose heartbeats resume (a healed partition) stays DOWN, unless
``recover_down_on_heartbeat``; an agent that restarted goes through BOOTING by its own
``boot_started`` / ``boot_checked`` events.

Freshness and silence are two ages: a heartbeat is fresh by its real age, while a node is
declared by how long it has been silent *as far as this control plane could see*, which
starts no earlier than when it began observing (a start, a pause, a lost connection;
DESIGN §9) or when the node became READY.
"""

from __future__ import annotations

from dataclasses import dataclass

from herdbook.events.node import (
    NodeDegraded,
    NodeDown,
    NodeDrained,
    NodeEvent,
    NodeFailed,
    NodeRecovered,
)
from herdbook.events.states import Intent, Lifecycle
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Decision

ACTOR = "sweeper"


@dataclass(frozen=True)
class Timeouts:
    heartbeat_timeout: float
    grace_period: float
    boot_timeout: float = 600.0


@dataclass(frozen=True)
class Observation:
    """What the sweeper knows of a node besides its view, on its own clock."""

    heartbeat_age: float               # since the last heartbeat (or registration)
    boot_id: str = ""                  # of the last heartbeat; "" if none was seen
    running_allocs: int | None = None  # from the last heartbeat
    booting_for: float | None = None   # seconds since the view entered BOOTING
    silent_for: float | None = None
    """Seconds the node counts as silent for a declaration, at most ``heartbeat_age``:
    since its last heartbeat, when it became READY or when this control plane began
    observing, whichever is last. None: ``heartbeat_age``."""


def decide(view: NodeView, seen: Observation, timeouts: Timeouts,
           recover_down_on_heartbeat: bool = False,
           drained_by_heartbeat: bool = True) -> list[NodeEvent]:
    """Every liveness event due for ``view`` now."""
    fresh = bool(seen.boot_id) and seen.heartbeat_age < timeouts.heartbeat_timeout
    silent_for = seen.heartbeat_age if seen.silent_for is None else seen.silent_for
    events: list[NodeEvent] = []
    if fresh:
        events += decide_on_heartbeat(view, seen.boot_id, recover_down_on_heartbeat)
    if not events:
        events += decide_on_age(view, silent_for, timeouts, seen.boot_id)
    if (view.lifecycle is Lifecycle.BOOTING and view.wipe_status != "wiping"
            and seen.booting_for is not None and seen.booting_for >= timeouts.boot_timeout):
        events.append(NodeFailed(node_id=view.id, actor=ACTOR,
                                 reason=f"boot timeout: BOOTING for {seen.booting_for:.0f}s "
                                        f"(limit {timeouts.boot_timeout:g}s)"))
    if (view.intent is Intent.DRAINING and fresh and seen.running_allocs == 0
            and drained_by_heartbeat):
        events.append(NodeDrained(node_id=view.id, actor=ACTOR,
                                  reason="no allocation runs on the node"))
    return events


def declaration(view: NodeView | None, seen: Observation, timeouts: Timeouts,
                recover_down_on_heartbeat: bool = False,
                drained_by_heartbeat: bool = True) -> Decision[NodeEvent] | None:
    """``decide`` on the node's view as it is now, as a decision of its version (none for
    a node that left the view)."""
    if view is None:
        return None
    return Decision(view.version, decide(view, seen, timeouts, recover_down_on_heartbeat,
                                         drained_by_heartbeat))


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
    if view.lifecycle is Lifecycle.DOWN and boot_id and recover_down_on_heartbeat:
        return [NodeRecovered(node_id=view.id, actor=ACTOR, boot_id=boot_id,
                              reason="heartbeat resumed (lifecycle.recover_down_on_heartbeat)")]
    return []


def next_deadline(view: NodeView, last_seen: float, timeouts: Timeouts,
                  booting_since: float | None = None) -> float | None:
    """When ``decide`` could next produce an event by the clock alone, on the same clock
    as ``last_seen`` (when the node's silence began, as ``Observation.silent_for``)."""
    if view.lifecycle is Lifecycle.READY:
        return last_seen + timeouts.heartbeat_timeout
    if view.lifecycle is Lifecycle.DEGRADED:
        return last_seen + timeouts.heartbeat_timeout + timeouts.grace_period
    if (view.lifecycle is Lifecycle.BOOTING and booting_since is not None
            and view.wipe_status != "wiping"):   # a wipe has its own sensitive.wipe_timeout
        return booting_since + timeouts.boot_timeout
    return None
