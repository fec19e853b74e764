"""`herd health test-policy`: the verdict a sample report would get, decided by the code
the classifier runs (``Policy.classify``, then ``reactors.health.decide_health`` on a
HEALTHY, READY node for the health it leads to), so what it shows is what a fleet would
see, not a second reading of the rules. Pure apart from compiling CEL."""

from __future__ import annotations

from typing import Any

import msgspec

from herdbook.events.health_report import (
    CHECK_STATUSES,
    CheckResult,
    GpuEvent,
    HealthReport,
    NodeHealthChanged,
)
from herdbook.events.node import NodeDown
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.health.navarch import describe
from herdbook.health.policy import Policy, Verdict
from herdbook.projector.node_view import NodeView
from herdbook.reactors.health import decide_health

SAMPLE_NODE = "policy-test"
_EVENT_FIELDS = tuple(GpuEvent.__struct_fields__)
_CHECK_FIELDS = ("kind", *CheckResult.__struct_fields__)


class SampleError(ValueError):
    """A sample event that is not one: the one line to print."""


def sample_item(text: str) -> GpuEvent | CheckResult:
    """One ``--event``: a GPU health event as the agent sends it (``{"kind": "xid",
    "gpu": 0, "xid": 79}``), or a check result as a rule sees it (``{"kind": "check",
    "name": "gpu", "status": "unhealthy"}``). A field the event does not have is
    refused: ignored, it would test a different event than the one written."""
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as err:
        raise SampleError(f"--event is not JSON: {err}") from None
    if not isinstance(raw, dict):
        raise SampleError("--event must be a JSON object, e.g. "
                          '\'{"kind": "xid", "gpu": 0, "xid": 79}\'')
    check = raw.get("kind") == "check"
    fields = _CHECK_FIELDS if check else _EVENT_FIELDS
    extra = sorted(set(raw) - set(fields))
    if extra:
        raise SampleError(f"--event: {', '.join(map(repr, extra))}: not a field of "
                          f"{'a check result' if check else 'an event'} (it has: "
                          f"{', '.join(fields)})")
    try:
        if check:
            raw.pop("kind")
            item: GpuEvent | CheckResult = msgspec.convert(raw, CheckResult)
        else:
            item = msgspec.convert(raw, GpuEvent)
    except msgspec.ValidationError as err:
        raise SampleError(f"--event: {err}") from None
    if isinstance(item, CheckResult) and item.status not in CHECK_STATUSES:
        raise SampleError(f"--event: status {item.status!r} is not one of "
                          f"{', '.join(CHECK_STATUSES)}")
    return item


def report_of(items: list[GpuEvent | CheckResult]) -> HealthReport:
    return HealthReport(report_id="sample", node_id=SAMPLE_NODE, boot_id="sample",
                        events=tuple(i for i in items if isinstance(i, GpuEvent)),
                        checks=tuple(i for i in items if isinstance(i, CheckResult)))


def health_effect(verdict: Verdict, threshold: int) -> str:
    """What the verdict does to a HEALTHY, READY node, report after report with the same
    verdict, as ``decide_health`` decides it."""
    view = NodeView(id=SAMPLE_NODE, type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=Health.HEALTHY)
    in_a_row = 0
    for report in range(1, max(threshold, 1) + 1):
        events, in_a_row = decide_health(view, verdict, in_a_row, threshold)
        said = [e.health if (e.level or "").upper() == e.health else f"{e.health} ({e.level})"
                for e in events if isinstance(e, NodeHealthChanged)]
        said += ["DOWN" for e in events if isinstance(e, NodeDown)]
        if said:
            when = ("at once" if report == 1 else f"after {report} such reports in a row "
                    f"(health.unhealthy_threshold: {threshold})")
            return f"{' and '.join(said)} {when}"
    return "HEALTHY: no change"


def trial(policy: Policy, items: list[GpuEvent | CheckResult],
          threshold: int) -> dict[str, Any]:
    """Each sample's rule and result, and the verdict of a report holding them all."""
    each = []
    for item in items:
        alone = policy.classify(report_of([item]))
        rule = alone.reasons[0].partition(":")[0] if alone.reasons else ""
        each.append({"event": describe(item), "rule": rule or "(none)",
                     "result": alone.result, "action": alone.action})
    verdict = policy.classify(report_of(items))
    return {"verdict": verdict.result, "events": each, "reasons": list(verdict.reasons),
            "action": verdict.action, "health": health_effect(verdict, threshold)}
