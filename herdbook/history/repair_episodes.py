"""What the repairs fold (``repairs.py``) keeps: each episode of one node's fault with its
steps, a first sign while no episode is open, each node's service segments
(docs/remediation.md#repairs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from herdbook.projector.node_view import NodeView

DURATIONS = ("time_to_quarantine", "time_to_drain", "time_in_repair", "mttr")


class RepairStep(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    step: str
    at: datetime
    actor: str = ""
    detail: str = ""


class Episode(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    """``<node>:<sequence of the first sign>``: unique in a log."""
    node_id: str
    pool: str = ""
    kind: str
    """What kind of fault: a GPU verdict's kind (xid, ecc_dbe, thermal, ...), health (a
    node check), down, failed, boot_check, wipe_failed or validation."""
    xid: int = 0
    reason: str = ""
    gpus: int = 0
    detected_at: datetime
    detected_by: str = ""
    quarantined_at: datetime
    quarantined_by: str = ""
    quarantine: str = ""
    """How it left service: the node's state then (unhealthy, down, cordoned, ...)."""
    drained_at: datetime | None = None
    drained_by: str = ""
    remediated_at: datetime | None = None
    remediated_by: str = ""
    remediation: str = ""      # reboot | restart | recovered | replace | wipe | operator
    validated_at: datetime | None = None
    validated_by: str = ""
    back_at: datetime | None = None
    back_by: str = ""
    replaced_by: str = ""
    outcome: str = "open"      # open | back | deleted
    steps: tuple[RepairStep, ...] = ()

    def durations(self) -> dict[str, float | None]:
        """The four durations in seconds; None where a step is missing."""
        def span(a: datetime | None, b: datetime | None) -> float | None:
            return None if a is None or b is None else (b - a).total_seconds()
        back = self.back_at if self.outcome == "back" else None
        return {"time_to_quarantine": span(self.detected_at, self.quarantined_at),
                "time_to_drain": span(self.quarantined_at, self.drained_at),
                "time_in_repair": span(self.quarantined_at, back),
                "mttr": span(self.detected_at, back)}


class Sign(msgspec.Struct, frozen=True, kw_only=True):
    """A first sign of trouble while no episode is open; dropped when it clears."""

    seq: int
    at: datetime
    actor: str
    detail: str
    out_at: datetime | None = None
    out_by: str = ""
    out_how: str = ""


class Segment(msgspec.Struct, frozen=True, array_like=True):
    """From ``at`` on (until the node's next segment): owned, in service, GPUs, pool."""

    at: datetime
    owned: bool
    in_service: bool
    gpus: int
    pool: str


@dataclass
class RepairsState:
    views: dict[str, NodeView] = field(default_factory=dict)
    """Each node as ``projector.node_fold`` folds it: what is in service is its rule."""
    open: dict[str, Episode] = field(default_factory=dict)
    closed: list[Episode] = field(default_factory=list)
    """In the order they closed."""
    signs: dict[str, Sign] = field(default_factory=dict)
    successors: dict[str, str] = field(default_factory=dict)
    """A replacement node -> the node it replaces (``instance.provisioning``)."""
    segments: dict[str, list[Segment]] = field(default_factory=dict)
    gated: frozenset[str] = frozenset()
    """The validation triggers configured (``validation.when`` where ``validation`` is
    enabled): a node due by one of them is not back in service until validated."""
    last_at: dict[str, datetime] = field(default_factory=dict)
    """Each node's latest step time: the next is never earlier."""
    seq: int = 0
    """The last sequence folded."""
