"""RecentFault history: what a CEL rule may know of a GPU's and a node's recent past.

The classifier keeps it, per node, from the health reports it reads: each health event
(kind, GPU index, XID code) at the time HERD_HEALTH stored its report (the server's
clock, never the agent's), for ``KEEP`` seconds (7 days, HERD_HEALTH's default
retention); and, per GPU serial, each time that GPU took its node out: a report whose
verdict was ``critical`` or ``fatal`` on an event of that GPU, counted once per node and
boot. The serial is the GPU's UUID as the node's info lists it (as stable as the board's
serial, and in every node's info).

Nothing is kept in a file: on start the classifier reads HERD_HEALTH from its first
report and folds the ones it decided on before into the history without deciding again
(``Policy.replay``), so a restarted control plane sees the same counts.

A rule sees the history of the report's node as functions (the report being classified
is counted already):

- ``history.xid_count(gpu, xid, window)``: XIDs ``xid`` on GPU ``gpu`` (-1: any GPU);
- ``history.event_count(gpu, kind, window)``: health events of ``kind`` on ``gpu``;
- ``history.gpu_pulls(gpu, window)``: times the GPU ``gpu`` of this node (by serial,
  whichever node held it) took its node out, this report not counted;
- ``history.max_gpu_pulls(window)``: the most of ``gpu_pulls`` over this node's GPUs;

``window`` is a CEL duration (``duration("24h")``), at most ``KEEP``. Pure apart from the
clock it is given.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from herdbook.clock import Clock
from herdbook.events.health_report import HealthReport

KEEP = 7 * 24 * 3600.0


@dataclass(frozen=True)
class RecentFault:
    at: float          # when HERD_HEALTH stored its report (epoch seconds)
    gpu: int
    kind: str
    xid: int = 0


@dataclass(frozen=True)
class Pull:
    at: float
    node_id: str
    boot_id: str


def _seconds(window: timedelta | float | int) -> float:
    seconds = window.total_seconds() if isinstance(window, timedelta) else float(window)
    return min(max(seconds, 0.0), KEEP)


class NodeFaults:
    """One node's history as of ``at``: what ``history.*`` in a rule calls."""

    def __init__(self, faults: deque[RecentFault] | tuple[RecentFault, ...], pulls: Mapping[str, deque[Pull]],
                 serials: Mapping[int, str], at: float) -> None:
        self._faults = faults
        self._pulls = pulls
        self._serials = serials
        self.at = at

    def xid_count(self, gpu: int, xid: int, window: timedelta | float) -> int:
        since = self.at - _seconds(window)
        return sum(1 for f in self._faults if f.at >= since and f.kind == "xid"
                   and f.xid == xid and (gpu < 0 or f.gpu == gpu))

    def event_count(self, gpu: int, kind: str, window: timedelta | float) -> int:
        since = self.at - _seconds(window)
        return sum(1 for f in self._faults if f.at >= since and f.kind == kind
                   and (gpu < 0 or f.gpu == gpu))

    def gpu_pulls(self, gpu: int, window: timedelta | float) -> int:
        pulls = self._pulls.get(self._serials.get(gpu, ""))
        if not pulls:                 # most GPUs were never pulled: no window to compute
            return 0
        since = self.at - _seconds(window)
        return sum(1 for p in pulls if p.at >= since)

    def max_gpu_pulls(self, window: timedelta | float) -> int:
        """The default policy asks it on every report's GPU check (``gpu-pulled-twice``):
        only the GPUs with a pull on record are counted."""
        pulled = [gpu for gpu, serial in self._serials.items() if serial in self._pulls]
        return max((self.gpu_pulls(gpu, window) for gpu in pulled), default=0)

    def functions(self) -> dict[str, Callable[..., int]]:
        """The CEL functions, by the name a rule calls them."""
        return {"history.xid_count": self.xid_count, "history.event_count": self.event_count,
                "history.gpu_pulls": self.gpu_pulls, "history.max_gpu_pulls": self.max_gpu_pulls}


NO_HISTORY = NodeFaults((), {}, {}, 0.0)
"""A node with no past (a policy checked on its own, ``herd health check-policy``)."""


class FaultHistory:
    """The fold: per node, its recent health events; per GPU serial, its pulls."""

    def __init__(self, clock: Clock, keep: float = KEEP) -> None:
        self.clock = clock
        self.keep = keep
        self.faults: dict[str, deque[RecentFault]] = defaultdict(deque)
        self.pulls: dict[str, deque[Pull]] = defaultdict(deque)

    def record(self, report: HealthReport, at: float) -> None:
        """The report's health events, stored at ``at``; older ones past ``keep`` go."""
        faults = self.faults[report.node_id]
        for event in report.events:
            faults.append(RecentFault(at, event.gpu, event.kind, event.xid))
        while faults and faults[0].at < at - self.keep:
            faults.popleft()
        if not faults:
            del self.faults[report.node_id]

    def record_pull(self, serial: str, report: HealthReport, at: float) -> None:
        """The GPU ``serial`` took its node out on ``report``: once per node and boot."""
        pulls = self.pulls[serial]
        while pulls and pulls[0].at < at - self.keep:
            pulls.popleft()
        if not any((p.node_id, p.boot_id) == (report.node_id, report.boot_id) for p in pulls):
            pulls.append(Pull(at, report.node_id, report.boot_id))

    def of(self, node_id: str, serials: Mapping[int, str], at: float) -> NodeFaults:
        return NodeFaults(self.faults.get(node_id, ()), self.pulls, serials, at)

    def when(self, at: float | None) -> float:
        """``at``, or the clock's now when the stored time is unknown."""
        return self.clock.now().timestamp() if at is None else at


def serials_of(info_gpus: Any) -> dict[int, str]:
    """GPU index -> serial (UUID) from a node's ``info.gpus``."""
    return {g.index: g.uuid for g in info_gpus}
