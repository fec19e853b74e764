"""Recent per-GPU telemetry for the console's charts: the last ``SAMPLES`` samples of
every node's GPUs (temperature, power, utilisation), in memory on each control-plane
replica, fed by ``telemetry_intake`` (DESIGN §10: telemetry never enters HERD_EVENTS,
so its history is not in the log).

Bounded by the fleet, not by time or by what is published: per node one fixed ring of
``SAMPLES`` slots, each a time (whole seconds, uint32) and per GPU three readings as
uint16 (°C, W and % rounded to a whole number; ``ABSENT`` where the GPU did not measure
it, shown as a gap, never as 0). At 8 GPUs a node's ring is 120 x (4 + 8 x 3 x 2) B =
6.2 KB: 6 MB for 1,000 nodes, 62 MB for 10,000. At the default 15 s
``--telemetry-interval`` 120 samples are the last 30 minutes; longer windows are
Prometheus's (``/metrics/gpus``, docs/metrics.md), not this ring's.

Pure: no I/O, times passed in.
"""

from __future__ import annotations

import math
from array import array
from typing import Any

from herdbook.events.telemetry import GpuTelemetry

SAMPLES = 120
FIELDS = ("temperature_c", "power_w", "gpu_util_pct")
ABSENT = 0xFFFF
_WIDTH = len(FIELDS)


def _packed(value: float | None) -> int:
    if value is None or not math.isfinite(value):
        return ABSENT
    return min(ABSENT - 1, max(0, round(value)))


class _Ring:
    """One node's ring: ``times[i]`` and, per GPU ``g`` (position in ``indexes``) and
    field ``f``, ``values[(i * gpus + g) * 3 + f]``."""

    __slots__ = ("count", "head", "indexes", "times", "values")

    def __init__(self, indexes: tuple[int, ...], size: int) -> None:
        self.indexes = indexes
        self.times = array("I", bytes(4 * size))
        self.values = array("H", bytes(2 * size * len(indexes) * _WIDTH))
        self.head = 0      # the next slot written
        self.count = 0

    def nbytes(self) -> int:
        return (self.times.itemsize * len(self.times)
                + self.values.itemsize * len(self.values))


class TelemetryRing:
    """``add`` a node's sample; ``series`` reads one node's GPUs back, oldest first."""

    def __init__(self, samples: int = SAMPLES) -> None:
        if samples < 1:
            raise ValueError("a ring holds at least one sample")
        self.samples = samples
        self._rings: dict[str, _Ring] = {}

    def add(self, telemetry: GpuTelemetry, at: float) -> None:
        """Keep ``telemetry`` as of ``at`` (epoch seconds: when it was received, the
        control plane's clock, so one node's clock cannot reorder the chart). A node
        whose GPUs changed starts a new ring: old samples name other GPUs."""
        gpus = sorted(telemetry.gpus, key=lambda r: r.index)
        indexes = tuple(r.index for r in gpus)
        ring = self._rings.get(telemetry.node_id)
        if ring is None or ring.indexes != indexes:
            ring = self._rings[telemetry.node_id] = _Ring(indexes, self.samples)
        slot = ring.head
        ring.times[slot] = max(0, min(0xFFFFFFFF, int(at)))
        base = slot * len(indexes) * _WIDTH
        for g, reading in enumerate(gpus):
            for f, name in enumerate(FIELDS):
                ring.values[base + g * _WIDTH + f] = _packed(getattr(reading, name))
        ring.head = (slot + 1) % self.samples
        ring.count = min(self.samples, ring.count + 1)

    def forget(self, node_id: str) -> None:
        self._rings.pop(node_id, None)

    def nbytes(self) -> int:
        """The rings' array bytes (what grows with the fleet)."""
        return sum(r.nbytes() for r in self._rings.values())

    def series(self, node_id: str, since: float = 0.0) -> dict[str, Any]:
        """``{"times": [...], "gpus": {index: {field: [value or None]}}}`` for the
        samples at or after ``since``, oldest first; empty for an unknown node."""
        ring = self._rings.get(node_id)
        if ring is None:
            return {"times": [], "gpus": {}}
        order = [(ring.head - ring.count + i) % self.samples for i in range(ring.count)]
        order = [i for i in order if ring.times[i] >= since]
        width = len(ring.indexes) * _WIDTH
        gpus: dict[str, dict[str, list[int | None]]] = {}
        for g, index in enumerate(ring.indexes):
            gpus[str(index)] = {
                name: [None if (v := ring.values[i * width + g * _WIDTH + f]) == ABSENT else v
                       for i in order]
                for f, name in enumerate(FIELDS)}
        return {"times": [ring.times[i] for i in order], "gpus": gpus}
