"""``GET /v1/fleet``'s rows: every node in one compact reply for the console's fleet table
and map (issue 28 item 1), pure functions of the view and the latest GPU telemetry.

Why an aggregate here rather than the console reading ``/v1/gpus``: at 10,000 nodes x 8
GPUs, ``/v1/gpus`` is 80,000 GPU replies (~25 MB of JSON over ~40 pages) to show two
numbers per node; the per-node hottest temperature and mean utilisation are two floats
in a row the console already reads. They are computed once per telemetry sample (the
sample object is the cache key), the rest of a row once per view position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol, TypeVar

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


class LatestSample(Protocol):
    """A node's latest telemetry as the control plane holds it
    (``reactors.telemetry_intake.LatestSample``; web/ reads it, imports nothing of reactors/)."""

    @property
    def telemetry(self) -> GpuTelemetry: ...


class Beat(Protocol):
    """A node's heartbeat record as the intake holds it (``reactors.heartbeats.NodeBeat``,
    updated in place): when it last arrived on the control plane's monotonic clock, and
    its boot ("" before the node's first heartbeat: no age yet)."""

    @property
    def last_seen(self) -> float: ...

    @property
    def boot_id(self) -> str: ...


def gpu_numbers(sample: LatestSample | None) -> tuple[float | None, float | None]:
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
_NULL = b"null"
V = TypeVar("V")


class _InRowOrder:
    """A table's values in the rows' order, read in the table's own order.

    Why (issue 32 item 3): looking each node up by id in the heartbeat and telemetry
    tables probes their hash indexes in random order and then follows each entry to its
    record, a few cache misses per node once 100k nodes' tables outgrow the CPU's
    caches (0.1 µs per node at 1k, 1.1 µs at 100k, measured). Walking a dict's keys and
    values is sequential; the permutation from the table's order to the rows' order is
    rebuilt only when the table's keys change (a node added or forgotten: rare), and
    applied in C (``itemgetter``), copying pointers without touching what they point to."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._ids: list[str] = []
        self._pick: Callable[[list[Any]], Sequence[Any]] = lambda values: ()

    def values(self, table: Mapping[str, Any], ids: list[str], missing: V,
               values: list[V]) -> Sequence[V]:
        """``values`` (the table's, in its order) picked in ``ids``' order; ``missing``
        for an id the table lacks."""
        keys = list(table)
        if keys != self._keys or ids is not self._ids:   # identical keys: no string compared
            self._keys, self._ids = keys, ids
            where = {k: i for i, k in enumerate(keys)}
            order = [where.get(k, len(keys)) for k in ids]   # past the end: ``missing``
            if len(order) == 1:
                only = order[0]
                self._pick = lambda values: (values[only],)
            elif order:
                self._pick = itemgetter(*order)
            else:
                self._pick = lambda values: ()
        values.append(missing)
        return self._pick(values)


class _Row:
    """One node's cached parts: its event-log columns as JSON (``[...,`` up to the live
    columns) valid for ``view`` and ``count``, and its GPU numbers (``t,u],``) for
    ``sample``."""

    __slots__ = ("count", "gpus", "head", "id", "sample", "view")

    def __init__(self, node_id: str) -> None:
        self.id = node_id
        self.view: NodeView | None = None
        self.count = -1
        self.head = b""
        self.sample: LatestSample | None = None
        self.gpus = b""


_NO_SAMPLE = b"," + _encode(gpu_numbers(None))[1:] + b","


class FleetJson:
    """``/v1/fleet``'s reply as JSON bytes, each node's row written once per view version.

    Why bytes and per-node parts (issue 32 item 3): the reply used to rebuild every
    static row, with a sort of all ids, whenever the view had folded any event, and
    built a fresh 17-item list per node per request for msgspec to walk. Here a row's
    event-log part is encoded once per (view, live allocation count): a view is a frozen
    Struct replaced on every change, so identity says whether it changed, and it is
    looked at only when the view has folded something since the last request; the GPU
    numbers once per telemetry sample (the sample object is the key); the rows are
    re-sorted only when membership changes (and made in id order, so a request walks
    them through memory in order). A request reads the heartbeat ages and samples
    in their tables' own order (``_InRowOrder``), writes each age (each distinct
    rounded age encoded once), and joins the cached parts once: no per-row
    concatenation (at 100k nodes each copy of 30 MB of rows costs more than it
    writes) and no per-row lookups by id."""

    def __init__(self) -> None:
        self._rows: list[_Row] = []
        self._ids: list[str] = []
        self._by_id: dict[str, _Row] = {}
        self._seen = -1
        self._beats = _InRowOrder()
        self._samples = _InRowOrder()
        self._ages: dict[float, bytes] = {}
        self.built = 0
        """Rows whose event-log part was encoded (a test reads it: one per changed view)."""

    def _refresh(self, nodes: Mapping[str, NodeView], counts: Mapping[str, int]) -> None:
        """After a fold: membership (re-sorted only when it changed) and changed views."""
        by_id = self._by_id
        if nodes.keys() != by_id.keys():
            self._ids = sorted(nodes)
            self._rows = [by_id.get(k) or _Row(k) for k in self._ids]
            self._by_id = {row.id: row for row in self._rows}
        for row in self._rows:
            view = nodes[row.id]
            count = counts.get(row.id, 0)
            if row.view is not view or row.count != count:
                row.view, row.count = view, count
                row.head = _encode(static_row(view, counts))[:-1] + b","
                self.built += 1

    def _age_parts(self, beats: Mapping[str, Beat], now: float) -> list[bytes]:
        """Each heartbeat's age as JSON, in the table's order: ``max(0, now - last_seen)``
        rounded to 0.1 s (``null`` before a node's first heartbeat). Ages repeat across
        the fleet (a tenth of a second apart over a heartbeat interval), so each distinct
        one is encoded once."""
        ages = self._ages
        if len(ages) > 100_000:                  # a bound, not expected: ages repeat
            ages.clear()
        out: list[bytes] = []
        append = out.append
        for beat in beats.values():
            if not beat.boot_id:
                append(_NULL)
                continue
            age = now - beat.last_seen
            age = round(age, 1) if age > 0 else 0.0
            part = ages.get(age)
            if part is None:
                part = ages[age] = _encode(age)
            append(part)
        return out

    def reply(self, nodes: Mapping[str, NodeView], allocs: Callable[[], Iterable[AllocView]],
              folded_seq: int, committed_seq: int, beats: Mapping[str, Beat], now: float,
              telemetry: Mapping[str, LatestSample]) -> bytes:
        """The whole reply: ``{"version", "columns", "rows"}`` in id order. ``beats``:
        the heartbeat records by node id, ``now`` on their monotonic clock;
        ``telemetry``: each node's latest sample."""
        if folded_seq != self._seen:
            self._refresh(nodes, live_allocs(allocs()))
            self._seen = folded_seq
        ages = self._beats.values(beats, self._ids, _NULL, self._age_parts(beats, now))
        samples = self._samples.values(telemetry, self._ids, None,
                                       list[LatestSample | None](telemetry.values()))
        parts: list[bytes] = [b'{"version":' + _encode(committed_seq) + b',"columns":'
                              + _COLUMNS_JSON + b',"rows":[']
        append = parts.append
        for row, age, sample in zip(self._rows, ages, samples, strict=True):
            if sample is not row.sample or not row.gpus:
                row.sample = sample
                row.gpus = _NO_SAMPLE if sample is None else (
                    b"," + _encode(gpu_numbers(sample))[1:] + b",")
            append(row.head)
            append(age)
            append(row.gpus)
        if len(parts) > 1:
            parts[-1] = parts[-1][:-1]          # the last row's comma
        append(b"]}")
        return b"".join(parts)
