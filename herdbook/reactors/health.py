"""Health decider: a classified report + the node view -> the next events. Pure.

- one ``fatal`` event (default: XID 79, ECC DBE): UNHEALTHY and DOWN at once, bypassing
  any grace period;
- one ``critical`` event (default: XID 43, 48, 63): UNHEALTHY at once; the node stays
  up, so the pool reconciler drains it before it replaces it;
- unhealthy reports: UNHEALTHY after ``unhealthy_threshold`` in a row;
- healthy / degraded: HEALTHY / DEGRADED, except that UNHEALTHY is sticky: only an
  operator's ``uncordon`` or ``enable`` clears it.
"""

from __future__ import annotations

from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.machine import LifecycleTrigger as Trigger
from herdbook.events.machine import next_lifecycle
from herdbook.events.node import NodeDown, NodeEvent
from herdbook.events.states import Health
from herdbook.health_policy import Verdict
from herdbook.projector.node_view import NodeView

ACTOR = "health-classifier"


def decide_health(view: NodeView, verdict: Verdict, unhealthy_in_a_row: int, threshold: int,
                  report_id: str = "", report_seq: int = 0) -> tuple[list[NodeEvent], int]:
    """Return the events to append and the new count of consecutive unhealthy reports.
    A health change carries ``report_seq``, the report's HERD_HEALTH sequence: the
    classifier's position commits with it."""
    reason = "; ".join(verdict.reasons)
    events: list[NodeEvent] = []
    if verdict.at_once:
        # the cause chain: health report -> classified fatal -> DOWN
        cause = report_id or None
        if view.health is not Health.UNHEALTHY:
            classified = NodeHealthChanged(node_id=view.id, actor=ACTOR, health=Health.UNHEALTHY,
                                           reason=f"fatal: {reason}", report_id=report_id,
                                           fatal=True, causation_id=cause,
                                           report_seq=report_seq)
            events.append(classified)
            cause = classified.event_id
        if verdict.fatal and next_lifecycle(view.lifecycle, Trigger.FATAL) is not None:
            events.append(NodeDown(node_id=view.id, actor=ACTOR, causation_id=cause,
                                   reason=f"fatal hardware event: {reason}"))
        return events, unhealthy_in_a_row + 1
    if verdict.result == "unhealthy":
        count = unhealthy_in_a_row + 1
        if count >= threshold and view.health is not Health.UNHEALTHY:
            events.append(NodeHealthChanged(
                node_id=view.id, actor=ACTOR, health=Health.UNHEALTHY, report_id=report_id,
                causation_id=report_id or None, report_seq=report_seq,
                reason=f"{count} consecutive unhealthy reports: {reason}"))
        return events, count
    if view.health is Health.UNHEALTHY:
        return [], 0
    target = Health.DEGRADED if verdict.result == "degraded" else Health.HEALTHY
    if view.health is not target:
        events.append(NodeHealthChanged(node_id=view.id, actor=ACTOR, health=target,
                                        reason=reason or "all checks pass", report_id=report_id,
                                        causation_id=report_id or None, report_seq=report_seq))
    return events, 0
