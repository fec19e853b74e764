"""``GET /v1/fleet``'s rows: every node in one compact reply for the console's fleet table
and map (issue 28 item 1), pure functions of the view and the latest GPU telemetry.

Why an aggregate here rather than the console reading ``/v1/gpus``: at 10,000 nodes x 8
GPUs, ``/v1/gpus`` is 80,000 GPU replies (~25 MB of JSON over ~40 pages) to show two
numbers per node; the per-node hottest temperature and mean utilisation are two floats
in a row the console already reads. They are computed once per telemetry sample (the
sample object is the cache key), the rest of a row once per view position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec

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


_encode = msgspec.json.encode
_COLUMNS_JSON = _encode(FLEET_COLUMNS)


class FleetJson:
    """``/v1/fleet``'s reply as JSON bytes, each node's row written once per view version.

    Why bytes and per-node entries (issue 32 item 3): the reply used to rebuild every
    static row, with a sort of all ids, whenever the view had folded any event, and
    built a fresh 17-item list per node per request for msgspec to walk; at 100k nodes
    that is ~100k new GC-tracked containers per request over a heap of millions of
    objects (the views), so the collector's passes grew with the fleet as well as the
    request did. Here a row's event-log part is encoded once per (view, live allocation
    count): a view is a frozen Struct replaced on every change, so identity says
    whether it changed; the GPU numbers once per telemetry sample (the sample object is
    the key); the ids are sorted again only when membership changes. A request writes
    only each heartbeat age and joins bytes, which the collector does not track."""

    def __init__(self) -> None:
        self._heads: dict[str, tuple[NodeView, int, bytes]] = {}
        self._gpus: dict[str, tuple[Sample | None, bytes]] = {}
        self._ids: list[str] = []
        self._ids_set: set[str] = set()
        self._allocs: dict[str, int] = {}
        self._seen = -1
        self.built = 0
        """Rows whose event-log part was encoded (a test reads it: one per changed view)."""

    def reply(self, nodes: Mapping[str, NodeView], allocs: Callable[[], Iterable[AllocView]],
              folded_seq: int, committed_seq: int,
              age: Callable[[str], float | None],
              telemetry: Callable[[str], Sample | None]) -> bytes:
        """The whole reply: ``{"version", "columns", "rows"}`` in id order."""
        if folded_seq != self._seen:
            self._allocs = live_allocs(allocs())
            keys = nodes.keys()
            if keys != self._ids_set:
                self._ids = sorted(keys)
                self._ids_set = set(keys)
                self._heads = {k: v for k, v in self._heads.items() if k in keys}
                self._gpus = {k: v for k, v in self._gpus.items() if k in keys}
            self._seen = folded_seq
        heads, gpus, counts = self._heads, self._gpus, self._allocs
        rows: list[bytes] = []
        for node_id in self._ids:
            view = nodes[node_id]
            count = counts.get(node_id, 0)
            head = heads.get(node_id)
            if head is None or head[0] is not view or head[1] != count:
                head = heads[node_id] = (view, count,
                                         _encode(static_row(view, counts))[:-1] + b",")
                self.built += 1
            sample = telemetry(node_id)
            numbers = gpus.get(node_id)
            if numbers is None or numbers[0] is not sample:
                numbers = gpus[node_id] = (sample, b"," + _encode(gpu_numbers(sample))[1:])
            beat = age(node_id)
            rows.append(head[2] + (b"null" if beat is None else _encode(round(beat, 1)))
                        + numbers[1])
        return (b'{"version":' + _encode(committed_seq) + b',"columns":' + _COLUMNS_JSON
                + b',"rows":[' + b",".join(rows) + b"]}")
