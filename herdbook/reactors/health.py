"""Health decider: a classified report + the node view -> the next events. Pure.

- one ``fatal`` event (default: XID 79, ECC DBE): UNHEALTHY and DOWN at once, bypassing
  any grace period;
- one ``critical`` event (default: XID 43, 48, 63): UNHEALTHY at once; the node stays
  up, so the pool reconciler drains it before it replaces it;
- unhealthy reports: UNHEALTHY after ``unhealthy_threshold`` in a row;
- healthy / degraded: HEALTHY / DEGRADED, except that UNHEALTHY is sticky: only an
  operator's ``uncordon`` or ``enable`` clears it;
- a healthy report of a DEGRADED node whose counter-like fault is still held
  (``health.fault_hold``): nothing, the node stays DEGRADED until the hold ends.

With ``gpus`` (the report's per-GPU verdicts, ``reactors/gpu_health.py``) every health
change carries the GPUs' map too, and a change of the map alone is one ``gpus_only``
health change.

Every health change carries the verdict's ``level`` and ``recommended_action`` (what to do:
``health.actions``), and its reason starts with it for
the two at-once levels (``critical: ...``, ``fatal: ...``); ``fatal`` is true only for
``fatal``, so a consumer can tell UNHEALTHY-and-up from UNHEALTHY-and-DOWN.
"""

from __future__ import annotations

from collections.abc import Mapping

from herdbook.durations import format_duration
from herdbook.events.health_report import GpuVerdict, NodeHealthChanged, VerdictLevel
from herdbook.events.machine import LifecycleTrigger as Trigger
from herdbook.events.machine import next_lifecycle
from herdbook.events.node import NodeDown, NodeEvent
from herdbook.events.states import Health
from herdbook.health.policy import Verdict
from herdbook.projector.node_view import NodeView
from herdbook.reactors.gpu_health import with_gpus

ACTOR = "health-classifier"


def decide_health(view: NodeView, verdict: Verdict, unhealthy_in_a_row: int, threshold: int,
                  report_id: str = "", report_seq: int = 0, *,
                  gpus: Mapping[int, GpuVerdict] | None = None) -> tuple[list[NodeEvent], int]:
    """Return the events to append and the new count of consecutive unhealthy reports.
    A health change carries ``report_seq``, the report's HERD_HEALTH sequence: the
    classifier's position commits with it. ``gpus``: the report's per-GPU verdicts
    (``gpu_health.report_gpus``); None leaves the GPUs' map alone."""
    events, count = _decide(view, verdict, unhealthy_in_a_row, threshold, report_id,
                            report_seq)
    if gpus is None:
        return events, count
    return with_gpus(view.gpus, view.health, view.id, events, gpus, report_id,
                     report_seq), count


def _decide(view: NodeView, verdict: Verdict, unhealthy_in_a_row: int, threshold: int,
            report_id: str, report_seq: int) -> tuple[list[NodeEvent], int]:
    reason = "; ".join(verdict.reasons)
    events: list[NodeEvent] = []
    if verdict.at_once:
        # the cause chain: health report -> classified critical or fatal -> DOWN (fatal)
        cause = report_id or None
        if view.health is not Health.UNHEALTHY:
            at_once: VerdictLevel = "fatal" if verdict.fatal else "critical"
            classified = NodeHealthChanged(node_id=view.id, actor=ACTOR, health=Health.UNHEALTHY,
                                           reason=f"{at_once}: {reason}", report_id=report_id,
                                           fatal=verdict.fatal, level=at_once,
                                           causation_id=cause, report_seq=report_seq,
                                           recommended_action=verdict.action)
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
                causation_id=report_id or None, report_seq=report_seq, level="unhealthy",
                reason=f"{count} consecutive unhealthy reports: {reason}",
                recommended_action=verdict.action))
        return events, count
    if view.health is Health.UNHEALTHY:
        return [], 0
    level: VerdictLevel
    if verdict.result == "degraded":
        target, level = Health.DEGRADED, "degraded"
        holds = max((f.hold for f in verdict.findings), default=0.0)
        if holds:   # say so now: a clean report will not clear it
            reason += f"; held {format_duration(holds)} after the last occurrence"
    elif view.health is Health.DEGRADED and verdict.held:
        return [], 0    # a counter-like fault's hold keeps it; it never makes DEGRADED
    else:
        target, level = Health.HEALTHY, "healthy"
        reason = "all checks pass" + (f"; hold ended: {'; '.join(verdict.ended)}"
                                      if verdict.ended else "")
    if view.health is not target:
        events.append(NodeHealthChanged(node_id=view.id, actor=ACTOR, health=target,
                                        reason=reason, report_id=report_id, level=level,
                                        causation_id=report_id or None, report_seq=report_seq,
                                        recommended_action=verdict.action))
    return events, 0
