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

from bisect import bisect_left
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec

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
from herdbook.api.present import MAX_LABEL_KEY, shown
from herdbook.clock import Clock
from herdbook.events.health_report import GpuVerdict
from herdbook.events.telemetry import GpuReading
from herdbook.fault_history import FaultHistory
from herdbook.history.times import iso
from herdbook.projector.node_view import NodeView
from herdbook.reactors.gpu_health import gpu_level
from herdbook.reactors.telemetry_intake import Sample
from herdbook.text import clip

PAGE_BYTES = 700_000
MAX_FAULTS = 50
DAY = 24 * 3600.0
Handler = Callable[[bytes], Awaitable[Any]]
_encoder = msgspec.json.Encoder()


class Telemetry(Protocol):
    """``reactors.telemetry_intake.TelemetryIntake``: a node's latest sample."""

    def of(self, node_id: str) -> Sample | None: ...


class NoTelemetry:
    def of(self, node_id: str) -> Sample | None:
        return None


def _when(epoch: float | None) -> str | None:
    return None if not epoch else iso(datetime.fromtimestamp(epoch, UTC))


def gpu_indexes(view: NodeView, sample: Sample | None) -> list[int]:
    indexes = {g.index for g in view.info.gpus} | set(view.gpus)
    if sample is not None:
        indexes |= {r.index for r in sample.telemetry.gpus}
    return sorted(indexes)


def _text(value: str | None) -> str | None:
    return None if value is None else clip(value, MAX_LABEL_KEY)


def gpu_summary(view: NodeView, index: int, sample: Sample | None) -> GpuSummary:
    return GpuSummary(**_summary_fields(view, index, sample, _reading(sample, index)))


def _reading(sample: Sample | None, index: int) -> GpuReading | None:
    if sample is None:
        return None
    return next((r for r in sample.telemetry.gpus if r.index == index), None)


def _summary_fields(view: NodeView, index: int, sample: Sample | None,
                    reading: GpuReading | None) -> dict[str, Any]:
    info = next((g for g in view.info.gpus if g.index == index), None)
    verdict = view.gpus.get(index)
    uuid = (reading.uuid if reading is not None and reading.uuid else None) or (
        info.uuid if info is not None else None)
    model = (reading.model if reading is not None else None) or (
        info.name if info is not None else None)
    hostname = (sample.telemetry.hostname if sample is not None else "") or view.info.hostname
    return {
        "node_id": view.id, "index": index, "uuid": _text(uuid),
        "serial": _text(reading.serial if reading is not None else None),
        "model": _text(model), "hostname": _text(hostname or None),
        "health": gpu_level(view.health, view.gpus, index),
        "cause": None if verdict is None else shown(verdict.reason),
        "since": None if verdict is None else _when(verdict.since),
        "node_state": view.state, "node_health": view.health,
        "pool": shown(view.info.labels.get("pool")),
        "temperature_c": None if reading is None else reading.temperature_c,
        "power_w": None if reading is None else reading.power_w,
        "gpu_util_pct": None if reading is None else reading.gpu_util_pct,
        "fb_used_mib": None if reading is None else reading.fb_used_mib,
        "fb_total_mib": None if reading is None else reading.fb_total_mib,
        "sampled_at": None if sample is None else _when(sample.telemetry.sampled_at),
        "recommended_action": None if verdict is None else verdict.recommended_action or None,
        **{name: None if reading is None else getattr(reading, name) for name in (
            "power_limit_w", "ecc_sbe_volatile", "ecc_dbe_volatile",
            "remapped_rows_uncorrectable")},
    }


def node_gpus(view: NodeView, sample: Sample | None) -> list[GpuSummary]:
    """Every GPU of one node (``node describe``'s GPU rows)."""
    return [gpu_summary(view, index, sample) for index in gpu_indexes(view, sample)]


def verdict_reply(verdict: GpuVerdict) -> GpuVerdictReply:
    return GpuVerdictReply(level=verdict.level, rule=verdict.rule,
                           reason=shown(verdict.reason) or "", kind=verdict.kind,
                           xid=verdict.xid or None, since=_when(verdict.since),
                           recommended_action=verdict.recommended_action or None)


def fault_counts(faults: list[GpuFault], now: float) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for window, seconds in (("24h", DAY), ("7d", 7 * DAY)):
        since = now - seconds
        counted = Counter(f"xid {f.xid}" if f.kind == "xid" else f.kind for f in faults
                          if datetime.fromisoformat(f.at).timestamp() >= since)
        out[window] = dict(sorted(counted.items()))
    return out


class GpuRoutes:
    def __init__(self, nodes: Callable[[], Mapping[str, NodeView]], telemetry: Telemetry,
                 faults: FaultHistory | None, clock: Clock) -> None:
        self.nodes = nodes
        self.telemetry = telemetry
        self.faults = faults
        self.clock = clock
        self._rows: dict[str, tuple[NodeView, Sample | None, list[tuple[int, str, bytes]]]] = {}

    def routes(self) -> dict[str, Handler]:
        return {"gpu.list": self.gpu_list, "gpu.describe": self.gpu_describe}

    def node_rows(self, view: NodeView) -> list[GpuSummary]:
        return node_gpus(view, self.telemetry.of(view.id))

    def rows(self, view: NodeView) -> list[tuple[int, str, bytes]]:
        """The node's GPUs as (index, health, reply JSON), built once per view and sample."""
        sample = self.telemetry.of(view.id)
        cached = self._rows.get(view.id)
        if cached is not None and cached[0] is view and cached[1] is sample:
            return cached[2]
        rows = []
        for index in gpu_indexes(view, sample):
            summary = gpu_summary(view, index, sample)
            rows.append((index, summary.health, _encoder.encode(summary)))
        self._rows[view.id] = (view, sample, rows)
        return rows

    async def gpu_list(self, data: bytes) -> msgspec.Raw:
        req = decode(data, ListGpus, empty=True)
        healths = {h.lower() for h in req.health}
        bad = healths - set(GPU_HEALTH)
        if bad:
            raise ApiError("bad_request", f"unknown GPU health {sorted(bad)[0]!r}; choose "
                                          f"from {', '.join(GPU_HEALTH)}")
        nodes = self.nodes()
        if req.node_id:
            ids = [resolve(nodes, req.node_id, "node").id]
        else:
            ids = sorted(nodes)
            if len(self._rows) > len(nodes):    # deleted nodes: their rows go
                self._rows = {k: v for k, v in self._rows.items() if k in nodes}
        after_node, after_index = "", -1
        if req.next_token:
            after_node, sep, index = req.next_token.rpartition("/")
            if not sep or not index.lstrip("-").isdigit():
                raise ApiError("bad_request", f"next_token {req.next_token!r} is not "
                                              "<node>/<index>")
            after_index = int(index)
        limit = min(req.limit, MAX_PAGE_ITEMS)
        items: list[bytes] = []
        size = 0
        last: str | None = None
        next_token: str | None = None
        start = bisect_left(ids, after_node) if after_node else 0
        for node_id in ids[start:]:
            view = nodes[node_id]
            if req.labels and any(view.info.labels.get(k) != v for k, v in req.labels.items()):
                continue
            for gpu, health, body in self.rows(view):
                if node_id == after_node and gpu <= after_index:
                    continue
                if healths and health not in healths:
                    continue
                size += len(body) + 1
                if items and (len(items) >= limit or size > PAGE_BYTES):
                    next_token = last
                    break
                items.append(body)
                last = f"{node_id}/{gpu}"
            if next_token is not None:
                break
        return msgspec.Raw(b'{"items":[' + b",".join(items) + b'],"next_token":'
                           + _encoder.encode(next_token) + b"}")

    async def gpu_describe(self, data: bytes) -> GpuDetail:
        req = decode(data, GpuById)
        view: NodeView = resolve(self.nodes(), req.node_id, "node")
        sample = self.telemetry.of(view.id)
        if req.index not in gpu_indexes(view, sample):
            raise ApiError("not_found", f"node {view.id} has no GPU {req.index} (its GPUs: "
                                        f"{', '.join(map(str, gpu_indexes(view, sample))) or 'none'})")
        reading = _reading(sample, req.index)
        fields = _summary_fields(view, req.index, sample, reading)
        info = next((g for g in view.info.gpus if g.index == req.index), None)
        faults = self._faults(view.id, req.index)
        uuid, serial = fields["uuid"], fields["serial"]
        verdict = view.gpus.get(req.index)
        return GpuDetail(
            **fields,
            pci_bus_id=_text(reading.pci_bus_id if reading is not None else None),
            driver_version=_text((reading.driver_version if reading is not None else None)
                                 or (info.driver_version if info is not None else None)
                                 or None),
            readings=None if reading is None else msgspec.to_builtins(reading),
            received_at=None if sample is None else _when(sample.received_at),
            verdict=None if verdict is None else verdict_reply(verdict),
            node_health_reason=shown(view.health_reason) or "",
            faults=faults[:MAX_FAULTS],
            fault_counts=fault_counts(faults, self.clock.now().timestamp()),
            serial_pulls=self._pulls(uuid, serial),
            serial_seen_on=self._seen_on(uuid, serial))

    def _faults(self, node_id: str, index: int) -> list[GpuFault]:
        if self.faults is None:
            return []
        return [GpuFault(at=_when(f.at) or "", kind=f.kind,
                         xid=f.xid if f.kind == "xid" else None)
                for f in reversed(self.faults.faults.get(node_id, ())) if f.gpu == index]

    def _pulls(self, *serials: str | None) -> list[GpuPull]:
        if self.faults is None:
            return []
        pulls = [p for s in dict.fromkeys(serials) if s for p in self.faults.pulls.get(s, ())]
        return [GpuPull(at=_when(p.at) or "", node_id=p.node_id, boot_id=p.boot_id)
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
