"""``gpu.*``: the GPU health API (issue 27 item 3), read from what the control plane holds:
each GPU's verdict and cause from the view (``NodeView.gpus``, decided by the classifier,
never parsed from text), its readings from the latest telemetry sample
(``reactors/telemetry_intake``), its faults from the classifier's fault history.

A node's GPUs are the union of those its info lists, those its telemetry measures and
those a verdict names, in index order. ``gpu.list`` pages like ``node.list``: GPUs in
(node id, index) order, ``next_token`` the last one's ``<node>/<index>``, each page at
most ``limit`` GPUs and ~``PAGE_BYTES``; a node's GPU replies are built once per view
and sample (``_rows``), so listing 80k GPUs re-encodes only what changed.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Protocol

import msgspec

from herdbook.api.gpu_rows import (
    clipped,
    gpu_indexes,
    iso_when,
    moment,
    node_gpus,
    node_rows,
    sample_key,
)
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import (
    GPU_HEALTH,
    MAX_PAGE_ITEMS,
    GpuById,
    GpuDetail,
    GpuFault,
    GpuPull,
    GpuSummary,
    GpuVerdictReply,
    ListGpus,
)
from herdbook.api.present import shown
from herdbook.clock import Clock
from herdbook.events.health_report import GpuVerdict
from herdbook.events.telemetry import GpuReading
from herdbook.health.fault_history import FaultHistory
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample

PAGE_BYTES = 700_000
WARM_STEP = 16
"""Nodes whose rows the next pages' warming builds between two returns to the loop:
128 GPUs of 8-GPU nodes, ~0.5 ms."""
WARM_PAGES = 2
"""Pages built ahead of the one asked for: one page of lead was used up building while
the page before travelled (`herd gpu list -o json` still waited ~7 ms a page)."""
MAX_FAULTS = 50
DAY = 24 * 3600.0
Handler = Callable[[bytes], Awaitable[Any]]
_encoder = msgspec.json.Encoder()


class TelemetrySource(Protocol):
    """``reactors.telemetry_intake.TelemetryIntake``: a node's latest sample; all of them
    by node id (``/v1/fleet`` reads them in one pass)."""

    def of(self, node_id: str) -> Sample | None: ...

    @property
    def latest(self) -> Mapping[str, Sample]: ...


class NoTelemetry:
    latest: Mapping[str, Sample] = MappingProxyType({})

    def of(self, node_id: str) -> Sample | None:
        return None


def gpu_summary(view: NodeView, index: int, sample: Sample | None) -> GpuSummary | None:
    """One GPU's row, None if the node has no GPU ``index``."""
    return next((g for g in node_gpus(view, sample) if g.index == index), None)


def _reading(sample: Sample | None, index: int) -> GpuReading | None:
    if sample is None:
        return None
    return next((r for r in sample.telemetry.gpus if r.index == index), None)


def verdict_reply(verdict: GpuVerdict) -> GpuVerdictReply:
    return GpuVerdictReply(level=verdict.level, rule=verdict.rule,
                           reason=shown(verdict.reason) or "", kind=verdict.kind,
                           xid=verdict.xid or None, since=iso_when(verdict.since),
                           recommended_action=verdict.recommended_action or None)


def fault_counts(faults: list[GpuFault], now: float) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for window, seconds in (("24h", DAY), ("7d", 7 * DAY)):
        since = now - seconds
        counted = Counter(f"xid {f.xid}" if f.kind == "xid" else f.kind for f in faults
                          if datetime.fromisoformat(f.at).timestamp() >= since)
        out[window] = dict(sorted(counted.items()))
    return out


class _Rows(msgspec.Struct, frozen=True, gc=False):
    """One node's ``gpu.list`` rows: each GPU's index and health and every row's JSON as
    they stand in a page (comma-separated), built from this view (the current one, or
    one the projector replaced since: small, its parts shared with the new one) and the
    sample of this ``sample_key``, which it names but does not hold. Not tracked by the
    garbage collector (nothing it holds refers back to it): the 10k entries a cold
    listing makes would otherwise be survivors that bring on full collections."""

    view: NodeView
    sample: tuple[str, float, float] | None
    indexes: tuple[int, ...]
    health_of: tuple[str, ...]
    """Each GPU's health, in the order of ``indexes``."""
    healths: int
    """Its GPUs' healths as bits (``health_bits``)."""
    body: bytes


_BIT: dict[str, int] = {word: 1 << (number + 1) for number, word in enumerate(GPU_HEALTH)}


def health_bits(words: Iterable[str]) -> int:
    """Health words as bits, one per word of ``GPU_HEALTH``; bit 0 for any other word
    (which no filter names): a node's healths and a filter's, compared in one operation."""
    bits = 0
    for word in words:
        bits |= _BIT.get(word, 1)
    return bits


class GpuRoutes:
    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]], telemetry: TelemetrySource,
                 faults: FaultHistory | None, clock: Clock) -> None:
        self.nodes = nodes
        self.telemetry = telemetry
        self.faults = faults
        self.clock = clock
        self._rows: dict[str, _Rows] = {}
        """Per node in the view (deleted ones dropped), its rows: at 10k nodes of 8 GPUs
        ~45 MB of reply JSON, and no sample."""
        self._ids: list[str] = []
        self._id_set: set[str] = set()
        self._warming: asyncio.Task[None] | None = None

    def routes(self) -> dict[str, Handler]:
        return {"gpu.list": self.gpu_list, "gpu.describe": self.gpu_describe}

    def node_rows(self, view: NodeView) -> list[GpuSummary]:
        return node_gpus(view, self.telemetry.of(view.id))

    def _sorted_ids(self, rows: Mapping[str, NodeView], first_page: bool) -> list[str]:
        """The node ids in order, sorted again only when the membership changed, so the
        pages of a listing cost no sort each; a deleted node's rows go then. The key
        sets are compared (~0.3 ms at 10k nodes) for a listing's first page and when the
        count changed; a later page trusts the ids its listing started with, less a node
        deleted since (the caller skips it), as a listing is no snapshot anyway."""
        if first_page or len(rows) != len(self._id_set):
            keys = rows.keys()
            if keys != self._id_set:
                self._ids, self._id_set = sorted(keys), set(keys)
                self._rows = {k: v for k, v in self._rows.items() if k in self._id_set}
        return self._ids

    def rows(self, view: NodeView) -> _Rows:
        """The node's GPU rows, built once per view and sample (a new sample every 15 s
        per node at the agent's default: a listing mostly builds)."""
        sample = self.telemetry.of(view.id)
        key = sample_key(sample)
        cached = self._rows.get(view.id)
        if cached is not None and cached.view is view and cached.sample == key:
            return cached
        gpus = node_rows(view, sample, moment)
        health_of = tuple([g.health for g in gpus])
        entry = self._rows[view.id] = _Rows(
            view, key, tuple([g.index for g in gpus]), health_of,
            health_bits(set(health_of)), _encoder.encode(gpus)[1:-1])
        return entry

    def _bodies(self, view: NodeView) -> list[bytes]:
        """Each GPU's row alone, for a node a page takes in part (cut by the page's end,
        the token or a health filter): built again, as rare as that is."""
        return [_encoder.encode(g) for g in node_rows(view, self.telemetry.of(view.id), moment)]

    async def gpu_list(self, data: bytes) -> msgspec.Raw:
        req = decode(data, ListGpus, empty=True)
        healths = {h.lower() for h in req.health}
        bad = healths - set(GPU_HEALTH)
        if bad:
            raise ApiError("bad_request", f"unknown GPU health {sorted(bad)[0]!r}; choose "
                                          f"from {', '.join(GPU_HEALTH)}")
        nodes = self.nodes()
        rows: Mapping[str, NodeView] = getattr(nodes, "rows", nodes)   # the Table's dict
        ids = ([resolve(nodes, req.node_id, "node").id] if req.node_id
               else self._sorted_ids(rows, not req.next_token))
        wanted = health_bits(healths)
        after_node, after_index = "", -1
        if req.next_token:
            after_node, sep, index = req.next_token.rpartition("/")
            if not sep or not index.lstrip("-").isdigit():
                raise ApiError("bad_request", f"next_token {req.next_token!r} is not "
                                              "<node>/<index>")
            after_index = int(index)
        limit = min(req.limit, MAX_PAGE_ITEMS)
        items: list[bytes] = []
        count = size = 0
        last: str | None = None
        next_token: str | None = None
        start = bisect_left(ids, after_node) if after_node else 0
        for node_id in ids[start:]:
            view = rows.get(node_id)
            if view is None or (req.labels and any(view.info.labels.get(k) != v
                                                   for k, v in req.labels.items())):
                continue
            entry = self.rows(view)
            if not entry.indexes or (wanted and not entry.healths & wanted):
                continue
            # The whole node in one piece where it fits: what a page is made of
            if node_id != after_node and (not wanted or not entry.healths & ~wanted):
                more = len(entry.indexes)
                if count + more <= limit and size + len(entry.body) + 1 <= PAGE_BYTES:
                    items.append(entry.body)
                    count += more
                    size += len(entry.body) + 1
                    last = f"{node_id}/{entry.indexes[-1]}"
                    continue
            for gpu, health, body in zip(entry.indexes, entry.health_of, self._bodies(view),
                                         strict=True):
                if node_id == after_node and gpu <= after_index:
                    continue
                if healths and health not in healths:
                    continue
                size += len(body) + 1
                if items and (count >= limit or size > PAGE_BYTES):
                    next_token = last
                    break
                items.append(body)
                count += 1
                last = f"{node_id}/{gpu}"
            if next_token is not None:
                break
        if next_token is not None and not req.node_id:
            self._warm_after(ids, bisect_left(ids, next_token.rpartition("/")[0]), req.labels)
        return msgspec.Raw(b"".join((b'{"items":[', b",".join(items), b'],"next_token":',
                                     _encoder.encode(next_token), b"}")))

    def _warm_after(self, ids: list[str], start: int, labels: Mapping[str, str]) -> None:
        """Builds the rows of the pages after this one (``WARM_PAGES`` pages' worth of
        nodes from ``ids[start]``, those with ``labels``) while this page travels to the
        client and the client reads it, ``WARM_STEP`` nodes at a time with the loop given
        back in between: their requests then find them built. The warming started by
        the page before stops (what it built stays; this one skips it)."""
        if self._warming is not None:
            self._warming.cancel()
        self._warming = asyncio.get_running_loop().create_task(
            self._warm(ids, start, dict(labels)))

    async def _warm(self, ids: list[str], start: int, labels: dict[str, str]) -> None:
        size = 0
        for at in range(start, len(ids), WARM_STEP):
            await asyncio.sleep(0)
            nodes = self.nodes()
            rows: Mapping[str, NodeView] = getattr(nodes, "rows", nodes)
            for node_id in ids[at:at + WARM_STEP]:
                view = rows.get(node_id)
                if view is not None and all(view.info.labels.get(k) == v
                                            for k, v in labels.items()):
                    size += len(self.rows(view).body) + 1
            if size > WARM_PAGES * PAGE_BYTES:
                return

    async def gpu_describe(self, data: bytes) -> GpuDetail:
        req = decode(data, GpuById)
        view: NodeView = resolve(self.nodes(), req.node_id, "node")
        sample = self.telemetry.of(view.id)
        if req.index not in gpu_indexes(view, sample):
            raise ApiError("not_found", f"node {view.id} has no GPU {req.index} (its GPUs: "
                                        f"{', '.join(map(str, gpu_indexes(view, sample))) or 'none'})")
        reading = _reading(sample, req.index)
        summary = gpu_summary(view, req.index, sample)
        assert summary is not None      # its index is one of gpu_indexes
        fields = msgspec.structs.asdict(summary)
        info = next((g for g in view.info.gpus if g.index == req.index), None)
        faults = self._faults(view.id, req.index)
        uuid, serial = fields["uuid"], fields["serial"]
        verdict = view.gpus.get(req.index)
        return GpuDetail(
            **fields,
            pci_bus_id=clipped(reading.pci_bus_id if reading is not None else None),
            driver_version=clipped((reading.driver_version if reading is not None else None)
                                 or (info.driver_version if info is not None else None)
                                 or None),
            readings=None if reading is None else msgspec.to_builtins(reading),
            received_at=None if sample is None else iso_when(sample.received_at),
            verdict=None if verdict is None else verdict_reply(verdict),
            node_health_reason=shown(view.health_reason) or "",
            faults=faults[:MAX_FAULTS],
            fault_counts=fault_counts(faults, self.clock.now().timestamp()),
            serial_pulls=self._pulls(uuid, serial),
            serial_seen_on=self._seen_on(uuid, serial))

    def _faults(self, node_id: str, index: int) -> list[GpuFault]:
        if self.faults is None:
            return []
        return [GpuFault(at=iso_when(f.at) or "", kind=f.kind,
                         xid=f.xid if f.kind == "xid" else None)
                for f in reversed(self.faults.faults.get(node_id, ())) if f.gpu == index]

    def _pulls(self, *serials: str | None) -> list[GpuPull]:
        if self.faults is None:
            return []
        pulls = [p for s in dict.fromkeys(serials) if s for p in self.faults.pulls.get(s, ())]
        return [GpuPull(at=iso_when(p.at) or "", node_id=p.node_id, boot_id=p.boot_id)
                for p in sorted(pulls, key=lambda p: -p.at)]

    def _seen_on(self, *serials: str | None) -> list[str]:
        wanted = {s for s in serials if s}
        if not wanted:
            return []
        seen = []
        for node_id, view in self.nodes().items():
            sample = self.telemetry.of(node_id)
            ids = {g.uuid for g in view.info.gpus}
            if sample is not None:
                ids |= {r.uuid for r in sample.telemetry.gpus}
                ids |= {r.serial for r in sample.telemetry.gpus if r.serial}
            if ids & wanted:
                seen.append(node_id)
        return sorted(seen)
