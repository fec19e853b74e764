"""The fleet over time, computed from the event log (what it is for): per bucket of a
window, the count of nodes in each state and health and the fleet health score at the
bucket's end, and the detections and recoveries that happened in it.

A detection is an open fault (``projector.score.faults_of``: unhealthy or degraded
health, down, failed, quarantined, drift) that a node's event opened; a recovery is one
that an event closed. Both are read off the same pure fold the projector runs
(``node_fold.apply``), so they are what the view showed then, not a guess from text.

Pure: the read side (``queries.fleet_history``) feeds the log's node events in stream
order; the whole log up to the window's end is folded, since the state at the window's
start depends on everything before it. Cost: one read of ``herd.node.>``; per bucket
the counts are kept as events arrive and the score is recomputed only for a bucket
where something changed (O(nodes) then).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import msgspec

from herdbook.events.node import NodeEvent
from herdbook.history.describe import reason_of, tag
from herdbook.history.times import iso
from herdbook.projector.as_of import Stored
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.projector.score import faults_of, fleet_score

WINDOWS = {"15m": 900, "1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}
"""The console's choices, and all that ``GET /v1/fleet/history?window=`` takes (the
OpenAPI document's enum); ``parse_window`` reads any duration from 1 minute to 7 days."""
BUCKETS = 120
MAX_MARKS = 500
"""The most detections and recoveries listed one by one (the newest); counts are exact."""


class FleetTimeline:
    """Fold node events into ``buckets`` equal buckets from ``start`` to ``end``."""

    def __init__(self, start: datetime, end: datetime, buckets: int = BUCKETS) -> None:
        if end <= start or buckets < 1:
            raise ValueError("a timeline needs end after start and one bucket or more")
        self.start = start
        self.end = end
        self.buckets = buckets
        self.step = (end - start) / buckets
        self.nodes: dict[str, NodeView] = {}
        self.states: Counter[str] = Counter()
        self.healths: Counter[str] = Counter()
        self._bucket = 0            # the bucket the next snapshot closes
        self._dirty = True
        self._score: Any = None
        self.points: list[dict[str, Any]] = []
        self.detections = [0] * buckets
        self.recoveries = [0] * buckets
        self.marks: list[dict[str, Any]] = []
        self.seq = 0

    def _boundary(self, bucket: int) -> datetime:
        return self.start + self.step * (bucket + 1)

    def _close_until(self, when: datetime) -> None:
        """Snapshot every bucket that ends before ``when`` (events stored later are not
        in it)."""
        while self._bucket < self.buckets and self._boundary(self._bucket) < when:
            self._snapshot()

    def _snapshot(self) -> None:
        if self._dirty or self._score is None:
            self._score = fleet_score(self.nodes.values())
            self._dirty = False
        score = self._score
        self.points.append({
            "at": iso(self._boundary(self._bucket)),
            "states": {k: v for k, v in sorted(self.states.items()) if v},
            "health": {k: v for k, v in sorted(self.healths.items()) if v},
            "score": score.score, "faults": score.faults,
            "detections": self.detections[self._bucket],
            "recoveries": self.recoveries[self._bucket]})
        self._bucket += 1

    def add(self, entry: Stored) -> None:
        event = entry.event
        if not isinstance(event, NodeEvent) or entry.stored_at > self.end:
            return
        self._close_until(entry.stored_at)
        old = self.nodes.get(event.node_id)
        new = apply(old, event, entry.seq)
        self.seq = entry.seq
        if old is not None:
            self.states[old.state] -= 1
            self.healths[str(old.health)] -= 1
        if new is None:
            self.nodes.pop(event.node_id, None)
        else:
            self.nodes[event.node_id] = new
            self.states[new.state] += 1
            self.healths[str(new.health)] += 1
        self._dirty = True
        if entry.stored_at < self.start:
            return
        bucket = min(self.buckets - 1, int((entry.stored_at - self.start) / self.step))
        before = set(faults_of(old)) if old is not None else set()
        after = set(faults_of(new)) if new is not None else before   # deleted: not a recovery
        for kind, counts, what in ((after - before, self.detections, "detection"),
                                   (before - after, self.recoveries, "recovery")):
            for fault in sorted(kind):
                counts[bucket] += 1
                self.marks.append({"at": iso(entry.stored_at), "seq": entry.seq,
                                   "node_id": event.node_id, "kind": what, "fault": fault,
                                   "event": tag(event), "reason": reason_of(event)[:200]})
                if len(self.marks) > 2 * MAX_MARKS:
                    del self.marks[:MAX_MARKS]

    def result(self) -> dict[str, Any]:
        """The window's points (every bucket, the last ones as the fold stands now)."""
        while self._bucket < self.buckets:
            self._snapshot()
        return {"from": iso(self.start), "to": iso(self.end),
                "step_s": self.step.total_seconds(), "as_of_seq": self.seq,
                "points": self.points, "marks": self.marks[-MAX_MARKS:],
                "detections": sum(self.detections), "recoveries": sum(self.recoveries)}


def parse_window(text: str) -> timedelta:
    """``15m``, ``1h``, ``7d``, ``90s``: a window from 1 minute to 7 days."""
    text = text.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.replace(".", "", 1).isdigit():
        raise ValueError(f"window {text!r}: write a duration such as 15m, 1h, 24h or 7d")
    seconds = float(number) * units[unit]
    if not 60 <= seconds <= WINDOWS["7d"]:
        raise ValueError(f"window {text!r}: choose from 1m to 7d")
    return timedelta(seconds=seconds)


def encode(result: dict[str, Any]) -> bytes:
    return msgspec.json.encode(result)
