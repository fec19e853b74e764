"""Fault holds: a counter-like fault keeps its verdict for a window after it last occurred.

The agent reports counters (NVLink errors, ECC single- and double-bit errors, PCIe
replays) as the increase since its previous check, and XIDs as they happen: one burst is
in one report, and the next report of the same node is clean again. Without a hold, a
node DEGRADED by an NVLink burst would be HEALTHY again one health interval later, and
the fault would be forgotten by the view. So a finding of a counter-like kind
(``COUNTER_LIKE``) that the policy found worse than healthy is *held*: for ``hold``
seconds after its last occurrence (the policy's ``hold``, or its rule's), a clean report
does not clear what it caused. Conditions are not held: a temperature or a failed check
is reported on every report for as long as it lasts, and its clearing is news.

A hold *keeps* a verdict; it never makes one. The health decider reads the holds only
for a node that is DEGRADED now (``reactors/health.py``): a node an operator cleared
(``herd node uncordon``: its health is UNKNOWN until the next report) is HEALTHY on its
next clean report, whatever is still held, so the clear takes effect at once.
``critical`` and ``fatal`` verdicts need no hold: UNHEALTHY is sticky already.

Times are when HERD_HEALTH stored each report (the server's clock), passed in: pure.
The classifier keeps one ``FaultHolds`` in memory and rebuilds it on start from the
reports it replays, as it does the fault history (``health.fault_history``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # a type only
    from herdbook.events.health_report import HealthEventKind

COUNTER_LIKE: frozenset[HealthEventKind] = frozenset({"xid", "ecc_sbe", "ecc_dbe", "nvlink", "pcie",
                                                      "sxid", "ib_flap"})
"""Event kinds that are occurrences (a counter's increase, an XID or NVSwitch SXid, an
InfiniBand port's link-down count going up), not conditions."""

DEFAULT_HOLD = 600.0
"""The policy's ``hold`` when it does not say: 10 minutes, ten reports at the agent's
default ``--health-interval`` of 1m."""


@dataclass(frozen=True)
class Finding:
    """One event of a report that the policy found worse than healthy, to be held."""

    key: str          # one hold per (rule, kind, GPU): a later occurrence extends it
    reason: str       # "rule: what matched", as in the verdict's reasons
    result: str       # the rule's result (``health.policy.RESULTS``)
    hold: float       # seconds it holds after this occurrence; 0: not held
    gpu: int = -1     # the GPU it is of (-1: none named), for the GPU's own verdict
    rule: str = ""
    kind: str = ""
    xid: int = 0
    action: str = "none"    # its recommended action (``health.actions``)


@dataclass(frozen=True)
class Held:
    reason: str
    result: str
    last_at: float    # when HERD_HEALTH stored the report of its last occurrence
    until: float      # last_at + its hold
    gpu: int = -1
    rule: str = ""
    kind: str = ""
    xid: int = 0
    action: str = "none"


@dataclass(frozen=True)
class Settled:
    """A node's holds at one time: those still in effect, and those that ended now."""

    active: tuple[Held, ...] = ()
    ended: tuple[Held, ...] = ()


class FaultHolds:
    """The fold: per node, per finding key, its latest hold."""

    def __init__(self) -> None:
        self._holds: dict[str, dict[str, Held]] = {}

    def record(self, node_id: str, findings: Iterable[Finding], at: float) -> None:
        """The findings of a report stored at ``at``. A later occurrence of the same key
        extends its hold; a report older than the hold's last occurrence (replayed out of
        order) never shortens it."""
        for finding in findings:
            if finding.hold <= 0:
                continue
            held = Held(finding.reason, finding.result, at, at + finding.hold, finding.gpu,
                        finding.rule, finding.kind, finding.xid, finding.action)
            holds = self._holds.setdefault(node_id, {})
            old = holds.get(finding.key)
            if old is None or held.until >= old.until:
                holds[finding.key] = held

    def settle(self, node_id: str, at: float) -> Settled:
        """The holds of ``node_id`` as of ``at``: those that end at or before ``at`` are
        dropped (and returned as ``ended``, once)."""
        holds = self._holds.get(node_id)
        if not holds:
            return Settled()
        ended = tuple(h for h in holds.values() if h.until <= at)
        if ended:
            for key in [k for k, h in holds.items() if h.until <= at]:
                del holds[key]
            if not holds:
                del self._holds[node_id]
        active = tuple(sorted(holds.values(), key=lambda h: -h.until)) if holds else ()
        return Settled(active, ended)

    def clear(self, node_id: str) -> None:
        """An operator cleared the node (uncordon, enable), or it was deleted."""
        self._holds.pop(node_id, None)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._holds
