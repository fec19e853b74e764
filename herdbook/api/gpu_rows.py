"""A node's GPUs as ``gpu.list`` rows (``GpuSummary``'s fields, in its order): what the
listing builds 80k of, so every per-GPU step here is counted (``benchmarks/
gpu_telemetry.py``). The rows' values come from the view (state, health, verdicts, the
info's GPUs), the latest telemetry sample (identity, readings) and neither else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from herdbook.api.messages import GpuSummary
from herdbook.api.present import MAX_LABEL_KEY, shown
from herdbook.events.states import Health
from herdbook.events.telemetry import GpuReading
from herdbook.history.times import iso
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample
from herdbook.text import clip


def iso_when(epoch: float | None) -> str | None:
    return None if not epoch else iso(datetime.fromtimestamp(epoch, UTC))


def gpu_indexes(view: NodeView, sample: Sample | None) -> list[int]:
    indexes = {g.index for g in view.info.gpus} | set(view.gpus)
    if sample is not None:
        indexes |= {r.index for r in sample.telemetry.gpus}
    return sorted(indexes)


def clipped(value: str | None) -> str | None:
    # clip's call only where it cuts: three of these per GPU of a listing
    return value if value is None or len(value) <= MAX_LABEL_KEY else clip(value, MAX_LABEL_KEY)


def sample_key(sample: Sample | None) -> tuple[str, float, float] | None:
    """A sample's identity (boot, the agent's sample time, when it arrived): what a
    cache of rows built from it keys on instead of holding it (a decoded 8-GPU sample is
    ~17 KB; a cache holding the sample it was built from keeps a replaced one alive)."""
    if sample is None:
        return None
    return sample.telemetry.boot_id, sample.telemetry.sampled_at, sample.received_at


FIELDS: tuple[str, ...] = GpuSummary.__struct_fields__
GpuRow = msgspec.defstruct("GpuRow", [(name, Any) for name in FIELDS], gc=False)
"""A ``GpuSummary`` as the listing builds it: the same fields in the same order, so the
same JSON, but made from positional values (a 23-keyword Struct call is ~1.5 µs, most
of a GPU's row at 80k of them), and not tracked by the garbage collector (it holds only
strings, numbers and None: no cycle), so 80k of them do not bring on the collections,
each a walk of the whole heap when full, that a cold listing otherwise triggers."""


class _NoInfo:
    """A GPU its node's info does not list: no uuid, no model name."""

    uuid = name = None


_NO_INFO = _NoInfo()


def moment(epoch: float | None) -> datetime | None:
    """``iso_when``'s time as the datetime msgspec encodes to the same text, at a tenth of
    its cost (``isoformat`` of an aware datetime is ~2.5 µs): the listing's rows."""
    return None if not epoch else datetime.fromtimestamp(epoch, UTC)


def _aligned(view: NodeView, sample: Sample | None) -> tuple[Any, Any]:
    """The node's GPUs in index order as (its readings, its infos), side by side: the
    sample's own order where it lists every GPU once, ascending, as the infos do (any
    agent's sample); else the union of the three sources, each absent one a stand-in."""
    infos = view.info.gpus
    readings = sample.telemetry.gpus if sample is not None else ()
    indexes = [r.index for r in readings]
    if (indexes == [g.index for g in infos] and indexes == sorted(set(indexes))
            and view.gpus.keys() <= set(indexes)):
        return readings, infos
    by_info = {g.index: g for g in infos}
    by_reading = {r.index: r for r in readings}
    order = sorted(by_info.keys() | view.gpus.keys() | by_reading.keys())
    return ([by_reading.get(i) or GpuReading(index=i) for i in order],
            [by_info.get(i, _NO_INFO) for i in order])


def node_rows(view: NodeView, sample: Sample | None,
              when: Callable[[float | None], Any] = iso_when) -> list[Any]:
    """Every GPU of one node, in index order, as ``GpuRow``s (times as ``when`` writes
    them). What is the node's (its state, health, pool, hostname, the sample's time) is
    derived once for the node, not once per GPU: at 8 GPUs a node that was most of the
    listing's cost."""
    readings, infos = _aligned(view, sample)
    node_id, verdicts = view.id, view.gpus
    node_state, node_health = view.state, view.health
    unjudged = "unknown" if node_health is Health.UNKNOWN else "healthy"    # gpu_level's rule
    pool = shown(view.info.labels.get("pool"))
    hostname = clipped(((sample.telemetry.hostname if sample is not None else "")
                      or view.info.hostname) or None)
    sampled_at = None if sample is None else when(sample.telemetry.sampled_at)
    out = []
    for r, info in zip(readings, infos, strict=True):
        verdict = verdicts.get(r.index) if verdicts else None
        if verdict is None:
            health, cause, since, action = unjudged, None, None, None
        else:
            health, cause = verdict.level, shown(verdict.reason)
            since, action = when(verdict.since), verdict.recommended_action or None
        # In FIELDS' order (a test holds the two to the same JSON)
        out.append(GpuRow(
            node_id, r.index, clipped(r.uuid or info.uuid), clipped(r.serial),
            clipped(r.model or info.name), hostname, health, cause, since, node_state,
            node_health, pool, r.temperature_c, r.power_w, r.gpu_util_pct, r.fb_used_mib,
            r.fb_total_mib, sampled_at, action, r.power_limit_w, r.ecc_sbe_volatile,
            r.ecc_dbe_volatile, r.remapped_rows_uncorrectable))
    return out


def node_gpus(view: NodeView, sample: Sample | None) -> list[GpuSummary]:
    """Every GPU of one node (``node describe``'s GPU rows, ``gpu describe``)."""
    return [GpuSummary(**msgspec.structs.asdict(row)) for row in node_rows(view, sample)]
