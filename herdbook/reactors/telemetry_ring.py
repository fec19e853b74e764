"""Per-GPU telemetry over time for the console's charts: every node's GPUs (temperature,
power, utilisation) in memory on each control-plane replica, fed by
``telemetry_intake`` (DESIGN §10: telemetry never enters HERD_EVENTS, so its history is
not in the log). Lost on restart: the intake's snapshot brings back only each node's
last stored sample.

Four tiers per node, each a fixed ring (``TIERS``): the last ``SAMPLES`` samples as they
came (30 minutes at the default 15 s ``--telemetry-interval``), then 1-minute means for
6 hours, 10-minute means for 24 hours and 1-hour means for 7 days, so every window the
console offers (15m ... 7d) is filled from what is kept, with 60 to 360 points. A mean
is of the samples that measured the reading (an absent reading counts in no mean; a
bucket where none did stays absent: a gap, never 0). Each tier takes every sample into
its open bucket's sums, written to its ring when a later sample opens the next bucket.

Bounded by the fleet, not by time or by what is published: a slot is a time (whole
seconds, uint32) and per GPU two uint16 words (°C and % as one byte each, W as a
word; rounded to a whole number; ``ABSENT8``/``ABSENT`` where not measured). At 8 GPUs
a node holds 798 slots x 36 B + 864 B of open sums = 29,592 B of arrays, whatever it
publishes (``nbytes``; benchmarks/console_fleet.py --ring measures the process's).

Pure: no I/O, times passed in.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, NamedTuple

from herdbook.events.telemetry import GpuTelemetry

SAMPLES = 120
FIELDS = ("temperature_c", "power_w", "gpu_util_pct")
ABSENT = 0xFFFF          # a power word not measured
ABSENT8 = 0xFF           # a temperature or utilisation byte not measured
_WIDTH = len(FIELDS)


class Tier(NamedTuple):
    step_s: int
    """0: each sample as it came; else the seconds each mean covers."""
    slots: int
    name: str


# Two slots beyond the span, so a full tier still reaches back a whole window.
TIERS = (Tier(0, SAMPLES, "samples"), Tier(60, 6 * 60 + 2, "1-minute means"),
         Tier(600, 24 * 6 + 2, "10-minute means"), Tier(3600, 7 * 24 + 2, "1-hour means"))


def _byte(value: float | None) -> int:
    if value is None or not math.isfinite(value):
        return ABSENT8
    return min(ABSENT8 - 1, max(0, round(value)))


def _word(value: float | None) -> int:
    if value is None or not math.isfinite(value):
        return ABSENT
    return min(ABSENT - 1, max(0, round(value)))


class _Store:
    """One tier of one node: ``times[i]`` and per GPU ``g`` the words
    ``words[(i * gpus + g) * 2]`` (temperature << 8 | utilisation) and ``... + 1``
    (power); for a mean tier, the open bucket's ``sums``/``counts`` per reading."""

    __slots__ = ("bucket", "counts", "count", "gpus", "head", "size", "step", "sums",
                 "times", "words")

    def __init__(self, tier: Tier, gpus: int) -> None:
        self.step = tier.step_s
        self.size = tier.slots
        self.gpus = gpus
        self.times = array("I", bytes(4 * tier.slots))
        self.words = array("H", bytes(2 * 2 * tier.slots * gpus))
        self.head = 0          # the next slot written
        self.count = 0
        self.bucket = -1       # the open bucket's number (time // step); -1: none yet
        sums = _WIDTH * gpus if tier.step_s else 0
        self.sums = array("d", bytes(8 * sums))
        self.counts = array("I", bytes(4 * sums))

    def nbytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self.times, self.words, self.sums, self.counts))

    def write(self, at: int, values: list[float | None]) -> None:
        slot = self.head
        self.times[slot] = at
        base = slot * self.gpus * 2
        words = self.words
        for g in range(self.gpus):
            temp, power, util = values[g * _WIDTH:(g + 1) * _WIDTH]
            words[base + 2 * g] = _byte(temp) << 8 | _byte(util)
            words[base + 2 * g + 1] = _word(power)
        self.head = (slot + 1) % self.size
        self.count = min(self.size, self.count + 1)

    def take(self, at: int, values: list[float | None]) -> None:
        """A mean tier: ``values`` (finite or None) into the bucket of ``at``; a later
        bucket closes the open one first (a late sample joins the open bucket)."""
        bucket = at // self.step
        if bucket > self.bucket:
            if self.bucket >= 0:
                self.write(self.bucket * self.step, self.means())
                for i in range(len(self.sums)):
                    self.sums[i] = 0.0
                    self.counts[i] = 0
            self.bucket = bucket
        sums, counts = self.sums, self.counts
        for i, value in enumerate(values):
            if value is not None:
                sums[i] += value
                counts[i] += 1

    def means(self) -> list[float | None]:
        return [s / n if n else None for s, n in zip(self.sums, self.counts, strict=True)]

    def oldest(self) -> int:
        return self.times[(self.head - self.count) % self.size]

    def reaches(self, since: float) -> bool:
        """It holds every sample since ``since``: it never wrapped, or its oldest slot is
        no later."""
        return self.count < self.size or self.oldest() <= since

    def rows(self) -> list[tuple[int, list[int | None]]]:
        """Oldest first: ``(time, [temp, power, util] per GPU)``; a mean tier's open
        bucket last, as its mean so far."""
        out = []
        for k in range(self.count):
            i = (self.head - self.count + k) % self.size
            values: list[int | None] = []
            for g in range(self.gpus):
                pair = self.words[(i * self.gpus + g) * 2]
                power = self.words[(i * self.gpus + g) * 2 + 1]
                values += [None if pair >> 8 == ABSENT8 else pair >> 8,
                           None if power == ABSENT else power,
                           None if pair & 0xFF == ABSENT8 else pair & 0xFF]
            out.append((self.times[i], values))
        if self.step and self.bucket >= 0:
            out.append((self.bucket * self.step,
                        [None if v is None else round(v) for v in self.means()]))
        return out


class _Ring:
    __slots__ = ("indexes", "stores")

    def __init__(self, indexes: tuple[int, ...]) -> None:
        self.indexes = indexes
        self.stores = tuple(_Store(tier, len(indexes)) for tier in TIERS)


class TelemetryRing:
    """``add`` a node's sample; ``series`` reads one node's GPUs back over a window,
    oldest first, from the finest tier that reaches back to its start."""

    def __init__(self) -> None:
        self.samples = SAMPLES
        self._rings: dict[str, _Ring] = {}

    def add(self, telemetry: GpuTelemetry, at: float) -> None:
        """Keep ``telemetry`` as of ``at`` (epoch seconds: when it was received, the
        control plane's clock, so one node's clock cannot reorder the chart). A node
        whose GPUs changed starts new rings: old samples name other GPUs."""
        gpus = sorted(telemetry.gpus, key=lambda r: r.index)
        indexes = tuple(r.index for r in gpus)
        ring = self._rings.get(telemetry.node_id)
        if ring is None or ring.indexes != indexes:
            ring = self._rings[telemetry.node_id] = _Ring(indexes)
        second = max(0, min(0xFFFFFFFF, int(at)))
        values = [v if v is not None and math.isfinite(v) else None
                  for reading in gpus for v in (reading.temperature_c, reading.power_w,
                                                reading.gpu_util_pct)]
        raw, *means = ring.stores
        raw.write(second, values)
        for store in means:
            store.take(second, values)

    def forget(self, node_id: str) -> None:
        self._rings.pop(node_id, None)

    def nbytes(self) -> int:
        """The rings' array bytes (what grows with the fleet)."""
        return sum(s.nbytes() for r in self._rings.values() for s in r.stores)

    def series(self, node_id: str, since: float = 0.0) -> dict[str, Any]:
        """``{"times": [...], "gpus": {index: {field: [value or None]}}, "step_s",
        "resolution", "kept_from"}`` from ``since`` on: the samples while they reach back
        that far, else the finest means that do (a mean tier's missing buckets are a
        gap: one point of None). ``kept_from``: the oldest time of what was read (later
        than ``since`` when less is kept: a young control plane, a new node)."""
        ring = self._rings.get(node_id)
        if ring is None:
            return {"times": [], "gpus": {}, "step_s": None, "resolution": None,
                    "kept_from": None}
        tier, store = next(((t, s) for t, s in zip(TIERS, ring.stores, strict=True)
                            if s.reaches(since)), (TIERS[-1], ring.stores[-1]))
        kept = store.rows()
        rows = [(t, v) for t, v in kept if t + store.step > since or t >= since]
        if store.step:
            rows = _with_gaps(rows, store.step, _WIDTH * len(ring.indexes))
        gpus: dict[str, dict[str, list[int | None]]] = {
            str(index): {name: [v[g * _WIDTH + f] for _, v in rows]
                         for f, name in enumerate(FIELDS)}
            for g, index in enumerate(ring.indexes)}
        return {"times": [t for t, _ in rows], "gpus": gpus,
                "step_s": store.step or None, "resolution": tier.name,
                "kept_from": kept[0][0] if kept else None}


def _with_gaps(rows: list[tuple[int, list[int | None]]], step: int,
               width: int) -> list[tuple[int, list[int | None]]]:
    """A point of None after each run of missing buckets, so the chart breaks its line."""
    out: list[tuple[int, list[int | None]]] = []
    for t, values in rows:
        if out and t - out[-1][0] > step:
            out.append((out[-1][0] + step, [None] * width))
        out.append((t, values))
    return out
