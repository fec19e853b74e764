"""Detections: the time from an injected failure to the first event in the view that
shows it (DEGRADED, DOWN, FAILED, QUARANTINED, or health DEGRADED/UNHEALTHY).

Fed by a projector listener, so the time is when the event was folded into the view
that ``herd node list`` reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from herdbook.events.breaker_events import NodeActionHeld
from herdbook.events.codec import event_tag
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import NodeDegraded, NodeDown, NodeFailed, NodeWipeFailed
from herdbook.events.states import Health


@dataclass
class Detection:
    node: str
    event: str
    at_s: float                 # since the tracker started
    reason: str = ""
    injected: str | None = None  # what was injected, None: nothing was (unprompted)
    latency_s: float | None = None


@dataclass
class Injection:
    node: str
    kind: str
    at_s: float
    detected: Detection | None = None


def shows_failure(event: Any) -> bool:
    """A held action (the circuit breaker open) is a detection too: the control plane saw
    the failure and chose not to act on it."""
    if isinstance(event, NodeDegraded | NodeDown | NodeFailed | NodeWipeFailed | NodeActionHeld):
        return True
    return (isinstance(event, NodeHealthChanged) and not event.gpus_only
            and event.health in (Health.DEGRADED, Health.UNHEALTHY))


@dataclass
class Detections:
    clock: Callable[[], float]
    """Monotonic seconds (the plane's clock's)."""
    started: float = -1.0
    """When tracking began (-1: at construction, by ``clock``)."""
    injections: list[Injection] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    _open: dict[str, Injection] = field(default_factory=dict)
    _touched: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.started < 0:
            self.started = self.clock()

    def now(self) -> float:
        return self.clock() - self.started

    def injected(self, node: str, kind: str) -> Injection:
        """A failure was injected now; the next failure event of ``node`` detects it."""
        injection = Injection(node, kind, self.now())
        self.injections.append(injection)
        self._open[node] = injection
        self._touched.add(node)
        return injection

    def on_event(self, node_id: str, view: Any, event: Any) -> None:
        """A projector listener: ``(node_id, view, event)``."""
        if not shows_failure(event):
            return
        detection = Detection(node_id, event_tag(type(event)), round(self.now(), 4),
                              getattr(event, "reason", "") or "")
        injection = self._open.pop(node_id, None)
        if injection is not None:
            detection.injected = injection.kind
            detection.latency_s = round(detection.at_s - injection.at_s, 4)
            injection.detected = detection
        elif node_id in self._touched:
            detection.injected = "(follow-up)"   # e.g. DOWN after DEGRADED of the same failure
        self.detections.append(detection)

    def pending(self) -> list[Injection]:
        return [i for i in self.injections if i.detected is None]

    def unprompted(self) -> list[Detection]:
        """Failure events on nodes nothing was injected into: false alarms."""
        return [d for d in self.detections if d.injected is None]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def latency_summary(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(values), "p50": round(percentile(values, 50), 3),
            "p99": round(percentile(values, 99), 3), "max": round(max(values), 3)}
