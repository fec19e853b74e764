"""Per-GPU verdicts (DESIGN §10): what the classifier decides of each GPU, beside the node's
verdict, carried on ``node.health_changed`` (``gpus``) and kept in the view. Pure.

A GPU's verdict is the worst of

- this report's health events of that GPU, as the policy classified them (the rule, the
  event's kind and XID: its cause), and
- the holds in effect of that GPU's counter-like faults (``health.fault_hold``), so an NVLink
  burst keeps its GPU DEGRADED as long as it keeps the node DEGRADED;

and a GPU found ``critical`` or ``fatal`` stays so until an operator clears the node
(``uncordon``/``enable`` empty the map in the fold), as UNHEALTHY is sticky for the node;
``unhealthy`` (a condition such as 95 °C, over the threshold) stays while the node is
UNHEALTHY. A GPU the map does not name is healthy.

A verdict keeps its ``since`` while its level and cause stay the same, so a fault
reported on every report changes nothing. When the node's health does not change but
the map does, the decider appends a ``node.health_changed`` with ``previous`` equal to
``health`` (``gpus_only``): the fold records the GPUs and leaves the node's health, and
the notifier ignores it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from msgspec.structs import replace

from herdbook.events.health_report import (  # noqa: F401 - gpu_level: read here too
    GpuVerdict,
    NodeHealthChanged,
    VerdictLevel,
    gpu_level,
)
from herdbook.events.node import NodeEvent
from herdbook.events.states import Health
from herdbook.health.policy import RESULTS, Verdict

RANK = {result: rank for rank, result in enumerate(RESULTS)}
STICKY = frozenset({"critical", "fatal"})
"""Levels a GPU keeps until an operator clears its node."""
ACTOR = "health-classifier"


def report_gpus(verdict: Verdict, at: float) -> dict[int, GpuVerdict]:
    """Each GPU's worst verdict on one report stored at ``at``: its events' and its
    faults' still held. A report's own event wins a tie with a hold."""
    out: dict[int, GpuVerdict] = {}
    for found in verdict.gpu_findings:
        _worst(out, found.gpu, GpuVerdict(level=_level(found.result), rule=found.rule,
                                          reason=found.reason, kind=found.kind,
                                          xid=found.xid, since=at,
                                          recommended_action=found.action))
    for held in verdict.holding:
        if held.gpu >= 0:
            _worst(out, held.gpu, GpuVerdict(level=_level(held.result), rule=held.rule,
                                             reason=held.reason, kind=held.kind,
                                             xid=held.xid, since=held.last_at,
                                             recommended_action=held.action))
    return out


def next_gpus(before: Mapping[int, GpuVerdict], now: Mapping[int, GpuVerdict],
              node_unhealthy: bool) -> dict[int, GpuVerdict]:
    """The map after a report: ``before`` (the view's) with its sticky verdicts kept and
    ``now`` (``report_gpus``) over them where worse; a verdict for the same cause as
    before keeps its ``since``."""
    out: dict[int, GpuVerdict] = {
        gpu: old for gpu, old in before.items()
        if old.level in STICKY or (node_unhealthy and old.level == "unhealthy")}
    for gpu, new in now.items():
        old = out.get(gpu)
        if old is not None and RANK[new.level] <= RANK[old.level]:
            continue
        prior = before.get(gpu)
        out[gpu] = prior if prior is not None and prior.same_as(new) else new
    return dict(sorted(out.items()))


def same_map(a: Mapping[int, GpuVerdict], b: Mapping[int, GpuVerdict]) -> bool:
    """The same GPUs with the same verdicts for the same causes."""
    return a.keys() == b.keys() and all(a[gpu].same_as(b[gpu]) for gpu in a)


def with_gpus(before: Mapping[int, GpuVerdict], health: Health, node_id: str,
              events: Iterable[NodeEvent], now: Mapping[int, GpuVerdict],
              report_id: str = "", report_seq: int = 0) -> list[NodeEvent]:
    """``events`` (the health decider's, on a node of ``health`` with GPU map
    ``before``) with the new map on each health change; where none is appended and the
    map changed, one ``gpus_only`` health change before the rest."""
    events = list(events)
    changes = [e for e in events if isinstance(e, NodeHealthChanged)]
    target = changes[-1].health if changes else health
    gpus = next_gpus(before, now, target is Health.UNHEALTHY)
    if changes:
        return [replace(e, gpus=gpus, previous=health) if isinstance(e, NodeHealthChanged)
                else e for e in events]
    if same_map(before, gpus):
        return events
    return [gpus_changed(node_id, health, gpus, report_id, report_seq), *events]


def gpus_changed(node_id: str, health: Health, gpus: Mapping[int, GpuVerdict],
                 report_id: str = "", report_seq: int = 0) -> NodeHealthChanged:
    """A change of the GPUs' verdicts alone: the node stays ``health``."""
    named = "; ".join(f"GPU {gpu} {v.level} ({v.reason})" for gpu, v in gpus.items())
    return NodeHealthChanged(node_id=node_id, actor=ACTOR, health=health, previous=health,
                             reason=f"GPU verdicts: {named or 'every GPU healthy'}",
                             report_id=report_id, report_seq=report_seq,
                             causation_id=report_id or None, gpus=dict(gpus))


def kept_gpus(before: Mapping[int, GpuVerdict], health: Health, node_id: str,
              dropped: Iterable[NodeEvent], instead: Iterable[NodeEvent]) -> list[NodeEvent]:
    """The circuit breaker held a health change (``instead``: what it appends): the
    GPUs' verdicts it carried are recorded all the same, the node's health is not."""
    out = list(instead)
    for event in dropped:
        if isinstance(event, NodeHealthChanged) and not same_map(before, event.gpus):
            out.append(gpus_changed(node_id, health, event.gpus, event.report_id,
                                    event.report_seq))
            break
    return out


def _level(result: str) -> VerdictLevel:
    return result if result in RANK else "healthy"   # RANK's keys: VERDICT_LEVELS


def _worst(out: dict[int, GpuVerdict], gpu: int, verdict: GpuVerdict) -> None:
    old = out.get(gpu)
    if old is None or RANK[verdict.level] > RANK[old.level]:
        out[gpu] = verdict
