"""Heartbeat age over time for the console's charts. Heartbeats are not events (they
live in HERD_HEARTBEATS, the latest per node), so the log cannot say how old they were
an hour ago: the web server samples the fleet's heartbeat age p50/p99/max every
``SAMPLE_S`` seconds into a fixed ring (``SAMPLES`` entries: 7 days at 30 s, ~3 MB) and
charts read it back per bucket. It starts empty when the control plane starts: a
window older than that shows no heartbeat line, never a zero.

Pure: the sampling task passes the time in.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from datetime import datetime
from typing import Any

SAMPLE_S = 30.0
SAMPLES = int(7 * 86400 / SAMPLE_S)


def percentiles(ages: list[float]) -> tuple[float, float, float] | None:
    """p50, p99 and max of ``ages`` (nearest rank), None for none."""
    if not ages:
        return None
    ages = sorted(ages)

    def pick(q: float) -> float:
        return round(ages[min(len(ages) - 1, int(q * len(ages)))], 1)
    return pick(0.5), pick(0.99), pick(1.0)


class AgeSeries:
    """``(epoch seconds, p50, p99, max)`` samples, oldest first, at most ``size``."""

    def __init__(self, size: int = SAMPLES) -> None:
        self.samples: deque[tuple[float, float, float, float]] = deque(maxlen=size)

    def add(self, at: float, ages: list[float]) -> None:
        pct = percentiles(ages)
        if pct is not None and (not self.samples or at > self.samples[-1][0]):
            self.samples.append((at, *pct))

    def buckets(self, start: datetime, end: datetime, buckets: int) -> list[dict[str, Any] | None]:
        """Per bucket of ``start``..``end``, the last sample in it (None: none)."""
        t0, t1 = start.timestamp(), end.timestamp()
        step = (t1 - t0) / buckets
        times = [s[0] for s in self.samples]
        out: list[dict[str, Any] | None] = []
        for i in range(buckets):
            hi = bisect_left(times, t0 + step * (i + 1))
            if hi == 0 or times[hi - 1] < t0 + step * i:
                out.append(None)
                continue
            _, p50, p99, top = self.samples[hi - 1]
            out.append({"p50": p50, "p99": p99, "max": top})
        return out
