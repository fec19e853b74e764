"""``GET /v1/fleet``'s rows: every node in one compact reply for the console's fleet table
and map (issue 28 item 1), pure functions of the view and the latest GPU telemetry.

Why an aggregate here rather than the console reading ``/v1/gpus``: at 10,000 nodes x 8
GPUs, ``/v1/gpus`` is 80,000 GPU replies (~25 MB of JSON over ~40 pages) to show two
numbers per node; the per-node hottest temperature and mean utilisation are two floats
in a row the console already reads. They are computed once per telemetry sample (the
sample object is the cache key), the rest of a row once per view position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from herdbook.events.health_report import gpu_level
from herdbook.events.states import Health
from herdbook.events.telemetry import GpuTelemetry
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView

STATIC_COLUMNS = ("id", "state", "health", "pool", "class", "labels", "schedulable", "gpus",
                  "approval", "intent", "gpus_healthy", "allocs", "last_event",
                  "last_event_at")
"""Columns that change only with the event log (built once per view position)."""
LIVE_COLUMNS = ("last_heartbeat_age", "gpu_temp_max", "gpu_util")
"""Columns read at each request: the heartbeat age and the latest telemetry sample."""
FLEET_COLUMNS = STATIC_COLUMNS + LIVE_COLUMNS


def live_allocs(allocs: Iterable[AllocView]) -> dict[str, int]:
    """Non-terminal allocations per node (``node list``'s ``allocations``)."""
    counts: dict[str, int] = {}
    for alloc in allocs:
        if not alloc.terminal:
            counts[alloc.node_id] = counts.get(alloc.node_id, 0) + 1
    return counts


def gpus_healthy(view: NodeView) -> int | None:
    """How many of the node's GPUs the classifier holds healthy; None before any verdict
    on the node (every GPU ``unknown``: "?" rather than "0 of 8")."""
    if view.health is Health.UNKNOWN:
        return None
    return sum(gpu_level(view.health, view.gpus, g.index) == "healthy" for g in view.info.gpus)


def static_row(view: NodeView, allocs: Mapping[str, int]) -> list[Any]:
    """The row's STATIC_COLUMNS, in order."""
    info = view.info
    return [view.id, view.state, view.health, info.labels.get("pool"), info.node_class,
            dict(info.labels), view.schedulable, len(info.gpus), view.approval, view.intent,
            gpus_healthy(view), allocs.get(view.id, 0), view.last_event,
            None if view.updated_at is None else view.updated_at.isoformat()]


class Sample(Protocol):
    """A node's latest telemetry as the control plane holds it
    (``reactors.telemetry_intake.Sample``; web/ reads it, imports nothing of reactors/)."""

    @property
    def telemetry(self) -> GpuTelemetry: ...


def gpu_numbers(sample: Sample | None) -> tuple[float | None, float | None]:
    """The hottest GPU's temperature (°C) and the mean GPU utilisation (%) of a sample,
    each over the GPUs that report it; None where none does (no sample, a CPU node, a
    sensor missing), never 0."""
    if sample is None:
        return None, None
    temps = [r.temperature_c for r in sample.telemetry.gpus if r.temperature_c is not None]
    utils = [r.gpu_util_pct for r in sample.telemetry.gpus if r.gpu_util_pct is not None]
    return (max(temps) if temps else None,
            round(sum(utils) / len(utils), 1) if utils else None)
