"""Queries over the repairs fold's state (``repairs.py``): the episodes in a window, the
percentiles of their durations, GPU-hours in service against owned."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from herdbook.history.repair_episodes import DURATIONS, Episode, RepairsState


def episodes(state: RepairsState, since: datetime | None = None, *, pool: str = "",
             kind: str = "", node_id: str = "") -> list[Episode]:
    """Closed and open episodes that touch ``since`` .. now (open, or detected or ended
    at or after it), oldest detection first, filtered by pool, kind and node."""
    found = [e for e in (*state.closed, *state.open.values())
             if (since is None or e.outcome == "open" or e.detected_at >= since
                 or (e.back_at is not None and e.back_at >= since))
             and (not pool or e.pool == pool) and (not kind or e.kind == kind)
             and (not node_id or e.node_id == node_id)]
    return sorted(found, key=lambda e: (e.detected_at, e.id))


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """Nearest rank over sorted values; None when there are none."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def stats(values: Iterable[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {"count": len(ordered), "p50": percentile(ordered, 0.5),
            "p90": percentile(ordered, 0.9), "p99": percentile(ordered, 0.99),
            "max": ordered[-1] if ordered else None,
            "mean": sum(ordered) / len(ordered) if ordered else None}


def summary(found: Iterable[Episode]) -> dict[str, Any]:
    """Percentiles of the four durations over the episodes back in service: for the
    fleet, per pool and per fault kind; and how many episodes are open."""
    found = list(found)
    closed = [e for e in found if e.outcome == "back"]
    open_count = sum(1 for e in found if e.outcome == "open")

    def group(rows: list[dict[str, float | None]]) -> dict[str, Any]:
        return {name: stats(v for r in rows if (v := r[name]) is not None)
                for name in DURATIONS}

    everything = [e.durations() for e in closed]    # once: three groupings read them
    pools: dict[str, list[dict[str, float | None]]] = {}
    kinds: dict[str, list[dict[str, float | None]]] = {}
    for episode, row in zip(closed, everything, strict=True):
        pools.setdefault(episode.pool, []).append(row)
        kinds.setdefault(episode.kind, []).append(row)
    return {"episodes": len(closed), "open": open_count,
            "fleet": group(everything),
            "pools": {name: group(items) for name, items in sorted(pools.items())},
            "kinds": {name: group(items) for name, items in sorted(kinds.items())}}


def availability(state: RepairsState, start: datetime, end: datetime) -> dict[str, Any]:
    """GPU-hours (and node-hours) owned and in service over ``start`` .. ``end``, for the
    fleet and per pool; ``availability`` is the GPU share, the node share where no GPU
    was owned, None where nothing was."""
    totals: dict[str, list[float]] = {}   # pool -> gpu owned, gpu in service, node ..
    for segments in state.segments.values():
        for i, seg in enumerate(segments):
            until = segments[i + 1].at if i + 1 < len(segments) else end
            seconds = (min(until, end) - max(seg.at, start)).total_seconds()
            if seconds <= 0 or not seg.owned:
                continue
            row = totals.setdefault(seg.pool, [0.0, 0.0, 0.0, 0.0])
            row[0] += seg.gpus * seconds
            row[2] += seconds
            if seg.in_service:
                row[1] += seg.gpus * seconds
                row[3] += seconds

    def shape(row: list[float]) -> dict[str, Any]:
        gpu_owned, gpu_in, node_owned, node_in = (v / 3600.0 for v in row)
        share = (gpu_in / gpu_owned if gpu_owned else
                 node_in / node_owned if node_owned else None)
        return {"gpu_hours_owned": round(gpu_owned, 3),
                "gpu_hours_in_service": round(gpu_in, 3),
                "node_hours_owned": round(node_owned, 3),
                "node_hours_in_service": round(node_in, 3),
                "availability": None if share is None else round(share, 6)}

    fleet = [sum(row[i] for row in totals.values()) for i in range(4)]
    return {**shape(fleet), "pools": {pool: shape(row) for pool, row in sorted(totals.items())}}
