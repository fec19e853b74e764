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
from itertools import compress, count
from operator import is_not, itemgetter
from typing import Any, Protocol, runtime_checkable

import msgspec

from herdbook.events.health_report import gpu_level
from herdbook.events.states import Health
from herdbook.events.telemetry import GpuTelemetry
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.web.row_order import InRowOrder, picker

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


class SeenTimes(Protocol):
    """The heartbeat times side by side (``reactors.seen_column.SeenColumn``, written by
    the intake): ``times[slots[node]]`` on the control plane's monotonic clock, NaN
    before the node's first counted heartbeat; ``generation`` changes with the slots."""

    @property
    def times(self) -> Sequence[float]: ...

    @property
    def slots(self) -> Mapping[str, int]: ...

    @property
    def generation(self) -> int: ...


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
_ZERO = _encode(0.0)


@runtime_checkable
class Followed(Protocol):
    """A projector table (``projector.tables.Table``): tells its listeners of each change
    as it folds it."""

    def subscribe(self, listener: Callable[[str, Any, Any], None]) -> Callable[[], None]: ...


_NO_SAMPLE = b"," + _encode(gpu_numbers(None))[1:]
_END = b"]}"


class FleetJson:
    """``/v1/fleet``'s reply as JSON bytes, each node's row written once per view version.

    Why bytes and per-node parts (issue 32 item 3): the reply used to rebuild every
    static row, with a sort of all ids, whenever the view had folded any event, and
    built a fresh 17-item list per node per request for msgspec to walk. Here a row's
    event-log part is encoded once per (view, live allocation count): a view is a frozen
    Struct replaced on every change, so identity says whether it changed, and it is
    looked at only when the view has folded something since the last request; the GPU
    numbers once per telemetry sample (the sample object is the key); the rows are
    re-sorted only when membership changes. A request reads the heartbeat ages and
    samples in their tables' own order (``_InRowOrder``), writes each age (each distinct
    rounded age encoded once), and joins the cached parts once: no per-row
    concatenation and no per-row lookups by id.

    Why segments (issue 32 item 3, linear at 100k): the bytes between two heartbeat ages
    (one row's GPU numbers and the next row's event-log part, ``t,u],[...,``) are one
    cached bytes object, rebuilt only when either input changes. A request touches one
    object per node (no per-row record, no separate head and tail) and lays segments and
    ages into the join's list by slice assignment, in C: at 100k nodes every per-node
    object a request touches is a cache miss the 1k fleet does not pay.

    Why journals (``follow``, issue 32 item 3): without them a request after a fold
    walks every row to find the changed views (``nodes[id]``, an identity test), and
    every request lists the telemetry table to find the changed samples; at 100k nodes
    each is a miss per node. Followed, the projector's tables and the telemetry intake
    name the ids they changed as they change them (a set add), and a request visits only
    those; a change of membership, a reloaded table or a removed allocation falls back
    to the full walk."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._views: list[NodeView | None] = []
        self._counts: list[int] = []
        self._heads: list[bytes] = []
        self._gpus: list[bytes] = []
        self._samples: list[LatestSample | None] = []
        self._segs: list[bytes] = [_END]
        self._seen = -1
        self._slot_gen = -1
        self._slot_ids: list[str] | None = None
        self._unseen: list[int] = []
        self._pick_times: Callable[[Sequence[float]], Sequence[float]] = lambda t: ()
        self._sample_order = InRowOrder()
        self._ages: dict[int, bytes] = {}
        self._row_of: dict[str, int] = {}
        self._rows_obj: object = None
        self._folded: set[str] | None = None
        """Followed: the node ids the projector folded since the last refresh."""
        self._alloc_nodes: set[str] | None = set()
        """Followed: the nodes of allocations changed since; None: one was removed."""
        self._allocs_dirty = False
        self._sampled: set[str] | None = None
        """Followed: the node ids whose latest sample changed since the last request."""
        self._samples_full = True
        self._unfollow: list[Callable[[], None]] = []
        self._followed = False
        self.built = 0
        """Rows whose event-log part was encoded (a test reads it: one per changed view)."""

    def follow_once(self, nodes: object, allocs: object, telemetry: object) -> None:
        """``follow`` the projector's tables and the telemetry intake (its ``watch()``) if
        not yet, and if they can be followed (a plane without telemetry walks)."""
        if self._followed:
            return
        self._followed = True
        watch = getattr(telemetry, "watch", None)
        if watch is not None and isinstance(nodes, Followed) and isinstance(allocs, Followed):
            self.follow(nodes, allocs, watch())

    def follow(self, nodes: Followed, allocs: Followed, sampled: set[str]) -> None:
        """Keep journals of what changes (``nodes``' and ``allocs``' listeners; ``sampled``
        the telemetry intake's ``watch()``), so a request visits only changed rows."""
        self.unfollow()
        self._followed = True
        folded: set[str] = set()
        self._folded, self._sampled = folded, sampled
        self._unfollow = [nodes.subscribe(lambda key, _row, _event: folded.add(key)),
                          allocs.subscribe(self._alloc_changed)]
        self._seen = -1                           # one full walk first

    def unfollow(self) -> None:
        for unsubscribe in self._unfollow:
            unsubscribe()
        self._unfollow, self._folded, self._sampled = [], None, None
        self._followed = False

    def _alloc_changed(self, _key: str, row: AllocView | None, _event: object) -> None:
        self._allocs_dirty = True
        if row is None:
            self._alloc_nodes = None
        elif self._alloc_nodes is not None:
            self._alloc_nodes.add(row.node_id)

    def _refresh_folded(self, nodes: Mapping[str, NodeView],
                        allocs: Callable[[], Iterable[AllocView]]) -> bool:
        """Followed: the rows of the nodes folded since (and of changed allocations'
        nodes); False where only the full walk will do (membership, a reload)."""
        folded = self._folded
        if (folded is None or self._alloc_nodes is None or nodes is not self._rows_obj
                or len(nodes) != len(self._ids)):
            return False
        ids = set(folded)
        folded.clear()
        counts: Mapping[str, int] | None = None
        if self._allocs_dirty:
            counts = live_allocs(allocs())
            ids |= self._alloc_nodes
            self._alloc_nodes, self._allocs_dirty = set(), False
        views, counts_now, heads, row_of = self._views, self._counts, self._heads, self._row_of
        for node_id in ids:
            i = row_of.get(node_id)
            view = nodes.get(node_id)
            if (i is None) != (view is None):
                return False                      # a node came or went: re-sort
            if i is None or view is None:
                continue
            count = counts_now[i] if counts is None else counts.get(node_id, 0)
            if views[i] is not view or counts_now[i] != count:
                views[i], counts_now[i] = view, count
                heads[i] = _encode(static_row(view, {node_id: count}))[:-1] + b","
                self.built += 1
                self._segs[i] = self._seg(i)
        return True

    def _seg(self, i: int) -> bytes:
        """The bytes before row ``i``'s age: row ``i - 1``'s GPU numbers (``,t,u]``) and a
        comma, then row ``i``'s event-log part; for ``i == len``, the last row's GPU
        numbers and the reply's end."""
        head = self._heads[i] if i < len(self._heads) else _END
        return head if i == 0 else self._gpus[i - 1] + (b"," + head if head is not _END
                                                         else head)

    def _refresh(self, nodes: Mapping[str, NodeView], counts: Mapping[str, int]) -> None:
        """After a fold: membership (re-sorted only when it changed) and changed views."""
        if self._folded is not None:
            self._folded.clear()
        self._alloc_nodes, self._allocs_dirty = set(), False
        self._rows_obj = nodes
        if len(nodes) != len(self._ids) or nodes.keys() != set(self._ids):
            old = dict(zip(self._ids, zip(self._views, self._counts, self._heads,
                                          self._samples, self._gpus, strict=True),
                           strict=True))
            self._ids = sorted(nodes)
            kept = [old.get(k, (None, -1, b"", None, _NO_SAMPLE)) for k in self._ids]
            self._views = [k[0] for k in kept]
            self._counts = [k[1] for k in kept]
            self._heads = [k[2] for k in kept]
            self._samples = [k[3] for k in kept]
            self._gpus = [k[4] for k in kept]
            self._segs = []
            self._row_of = {k: i for i, k in enumerate(self._ids)}
            self._samples_full = True
        views, counts_now, heads = self._views, self._counts, self._heads
        changed: list[int] = []
        for i, node_id in enumerate(self._ids):
            view = nodes[node_id]
            count = counts.get(node_id, 0)
            if views[i] is not view or counts_now[i] != count:
                views[i], counts_now[i] = view, count
                heads[i] = _encode(static_row(view, counts))[:-1] + b","
                self.built += 1
                changed.append(i)
        if not self._segs:
            self._segs = [self._seg(i) for i in range(len(self._ids) + 1)]
        else:
            for i in changed:
                self._segs[i] = self._seg(i)

    def _age_parts(self, seen: SeenTimes, now: float) -> list[bytes]:
        """Each row's heartbeat age as JSON: ``max(0, now - seen)`` rounded to 0.1 s
        (``null`` before a node's first heartbeat). The times are read from one array in
        a slot order rebuilt only when the slots change; ages repeat across the fleet (a
        tenth of a second apart over a heartbeat interval), so each distinct one is
        encoded once, keyed by its count of tenths."""
        if seen.generation != self._slot_gen or self._slot_ids is not self._ids:
            self._slot_gen, self._slot_ids = seen.generation, self._ids
            slots = seen.slots
            order = [slots.get(k, -1) for k in self._ids]
            self._unseen = [i for i, s in enumerate(order) if s < 0]
            order = [max(s, 0) for s in order]
            self._pick_times = itemgetter(*order) if len(order) > 1 else picker(order)
        if not seen.times:                       # no node has a slot (missing ones read 0)
            return [_NULL] * len(self._ids)
        ages = self._ages
        if len(ages) > 100_000:                  # a bound, not expected: ages repeat
            ages.clear()
        out: list[bytes] = []
        append = out.append
        get = ages.get
        for t in self._pick_times(seen.times) if self._ids else ():
            age = now - t
            if age > 0:
                tenths = int(age * 10.0 + 0.5)
                part = get(tenths)
                if part is None:
                    part = ages[tenths] = _encode(tenths / 10)
                append(part)
            else:                                # 0, or NaN: no heartbeat yet
                append(_ZERO if age == age else _NULL)
        for i in self._unseen:
            out[i] = _NULL
        return out

    def _take_sampled(self, telemetry: Mapping[str, LatestSample]) -> bool:
        """Followed: the rows whose sample changed, by the intake's journal; False where
        the full comparison is due (membership changed since)."""
        sampled = self._sampled
        if sampled is None or self._samples_full:
            return False
        row_of, old, segs, gpus = self._row_of, self._samples, self._segs, self._gpus
        for node_id in sampled:
            i = row_of.get(node_id)
            if i is None:
                continue
            sample = telemetry.get(node_id)
            if sample is not old[i]:
                old[i] = sample
                gpus[i] = (_NO_SAMPLE if sample is None
                           else b"," + _encode(gpu_numbers(sample))[1:])
                segs[i + 1] = self._seg(i + 1)
        sampled.clear()
        return True

    def _take_samples(self, samples: Sequence[LatestSample | None]) -> None:
        """GPU numbers for the rows whose sample is not the one their segment holds
        (compared by identity in C; a Python step only per changed row)."""
        old = self._samples
        segs, gpus = self._segs, self._gpus
        for i in compress(count(), map(is_not, samples, old)):
            sample = old[i] = samples[i]
            gpus[i] = _NO_SAMPLE if sample is None else b"," + _encode(gpu_numbers(sample))[1:]
            segs[i + 1] = self._seg(i + 1)

    def reply(self, nodes: Mapping[str, NodeView], allocs: Callable[[], Iterable[AllocView]],
              folded_seq: int, committed_seq: int, seen: SeenTimes, now: float,
              telemetry: Mapping[str, LatestSample]) -> bytes:
        """The whole reply: ``{"version", "columns", "rows"}`` in id order. ``seen``:
        the heartbeat times, ``now`` on their monotonic clock;
        ``telemetry``: each node's latest sample."""
        if folded_seq != self._seen:
            if not self._refresh_folded(nodes, allocs):
                self._refresh(nodes, live_allocs(allocs()))
            self._seen = folded_seq
        ages = self._age_parts(seen, now)
        if not self._take_sampled(telemetry):
            if self._sampled is not None:
                self._sampled.clear()
            self._samples_full = False
            self._take_samples(self._sample_order.values(
                telemetry, self._ids, None, list[LatestSample | None](telemetry.values())))
        parts: list[bytes] = [b""] * (2 * len(self._ids) + 2)
        parts[0] = (b'{"version":' + _encode(committed_seq) + b',"columns":'
                    + _COLUMNS_JSON + b',"rows":[')
        parts[1::2] = self._segs
        parts[2::2] = ages
        return b"".join(parts)
