"""Health reports (HERD_HEALTH) and the health event of the node aggregate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

import msgspec

from herdbook.events.node import NodeEvent
from herdbook.events.states import Health

HealthEventKind = Literal["xid", "thermal", "ecc_sbe", "ecc_dbe", "nvlink", "pcie",
                          # the deeper node checks (``agent.deep_checks``, ``agent.kmsg``)
                          "remap_pending", "remap_failed", "throttle", "pcie_link",
                          "nvlink_down", "ib_port_down", "ib_flap", "sxid", "gpu_count"]
"""What a raw GPU health event is about; a report with another kind is refused at decode."""
HEALTH_EVENT_KINDS: tuple[HealthEventKind, ...] = get_args(HealthEventKind)

CheckStatus = Literal["healthy", "degraded", "unhealthy"]
CHECK_STATUSES: tuple[CheckStatus, ...] = get_args(CheckStatus)

VerdictLevel = Literal["healthy", "degraded", "unhealthy", "critical", "fatal"]
"""The level of a verdict, least to most severe: the policy's results
(``health.policy.RESULTS``). ``critical`` (UNHEALTHY, the node stays up) is not ``fatal``
(UNHEALTHY and DOWN): one spelling here, so the two cannot be mixed up again."""
VERDICT_LEVELS: tuple[VerdictLevel, ...] = get_args(VerdictLevel)

GpuHealth = Literal[VerdictLevel, "unknown"]
"""A GPU's health as the API shows it (``gpu_level``): its verdict's level, or ``unknown``
before its node's first verdict."""
GPU_HEALTHS: tuple[GpuHealth, ...] = get_args(GpuHealth)


class GpuEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One raw GPU health event, as NVML reported it."""

    kind: HealthEventKind
    gpu: int = -1
    xid: int = 0
    value: float = 0.0         # temperature °C, error count, ...
    message: str = ""
    source: str = ""
    """Who saw an XID: nvml, kmsg (the kernel log) or nvml+kmsg (``agent.kmsg``)."""
    fatal: bool = False
    """An NVSwitch SXid the driver calls fatal (``sxid`` events; ``xid`` holds its code)."""


class CheckResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    name: str                  # boot | gpu | health_events
    status: str                # healthy | degraded | unhealthy
    message: str = ""
    metrics: dict[str, Any] = msgspec.field(default_factory=dict)


class HealthReport(msgspec.Struct, frozen=True, kw_only=True):
    """What the agent publishes to ``herd.health.<node_id>`` every health interval."""

    report_id: str
    node_id: str
    boot_id: str
    sent_at: float = 0.0       # the agent's clock: shown, never trusted
    checks: tuple[CheckResult, ...] = ()
    events: tuple[GpuEvent, ...] = ()


class GpuVerdict(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One GPU's verdict and its cause, as the classifier decided it (DESIGN §10): the
    worst result of this GPU's health events on the report, or of a fault of it still
    held (``health.fault_hold``). A GPU a node's last verdict names none for is healthy."""

    level: VerdictLevel
    rule: str = ""             # the policy rule that matched
    reason: str = ""           # "rule: what matched", as in the node's reason
    kind: str = ""             # the health event's kind (xid, thermal, ecc_dbe, ...)
    xid: int = 0
    recommended_action: str = ""
    """What to do about it (``health.actions``): none, restart_workload, reset_gpu,
    reboot_node or inspect_hardware; empty on verdicts decided before it was recorded."""
    since: float = 0.0
    """When HERD_HEALTH stored the report this verdict was first decided on (epoch
    seconds, the server's clock); kept while the verdict and its cause stay the same
    (a counter-like fault's hold included)."""

    def same_as(self, other: GpuVerdict) -> bool:
        """The same verdict for the same cause (its time aside)."""
        return (self.level, self.rule, self.kind, self.xid) == (
            other.level, other.rule, other.kind, other.xid)


class NodeHealthChanged(NodeEvent, frozen=True, kw_only=True, tag="node.health_changed"):
    """The classifier's verdict changed the node's health (DESIGN §4), or only one of its
    GPUs' verdicts (``previous`` equal to ``health``)."""

    health: Health
    reason: str = ""
    report_id: str = ""
    fatal: bool = False
    """True only for a ``fatal`` verdict (UNHEALTHY and DOWN); a ``critical`` one (UNHEALTHY,
    the node stays up) is False: read ``level``."""
    report_seq: int = 0
    """The HERD_HEALTH sequence of the report decided on: the classifier's position,
    committed with what it decided (0: not decided on a report, or before it was kept)."""
    level: VerdictLevel | None = None
    """The verdict's own level: ``healthy``, ``degraded``, ``unhealthy`` (the threshold
    reached), ``critical`` (UNHEALTHY at once, the node stays up) or ``fatal`` (UNHEALTHY
    and DOWN). None on events written before it was recorded (issue 26), when a
    ``critical`` verdict was written as ``fatal: true``."""
    gpus: dict[int, GpuVerdict] = msgspec.field(default_factory=dict)
    """Every GPU of the node whose verdict is not healthy, by index, with its cause: the
    whole map as of this decision (a GPU not named is healthy). Empty on events written
    before per-GPU verdicts were recorded (issue 27)."""
    recommended_action: str | None = None
    """What to do about the verdict (``health.actions``): ``none``, ``restart_workload``,
    ``reset_gpu``, ``reboot_node`` or ``inspect_hardware``, the most disruptive of its
    faults'. None on events written before it was recorded (issue 29)."""
    previous: Health | None = None
    """The node's health before this event. Equal to ``health``: only a GPU's verdict
    changed (the node's health, reason and time stay; nobody is notified). None on
    events written before it was recorded."""

    @property
    def gpus_only(self) -> bool:
        """Only the GPUs' verdicts changed, not the node's health."""
        return self.previous is not None and self.previous is self.health


def gpu_level(view_health: Health, gpus: Mapping[int, GpuVerdict], index: int) -> GpuHealth:
    """A GPU's health as the API shows it: its verdict's level, ``healthy`` where its
    node was decided on and the map does not name it, ``unknown`` before any verdict
    (or after an operator cleared the node, until its next report)."""
    verdict = gpus.get(index)
    if verdict is not None:
        return verdict.level
    return "unknown" if view_health is Health.UNKNOWN else "healthy"
