"""The wire of ``fleet.repairs`` (``api/repair_routes.py``), imported by the server and the CLI
alike. Light: msgspec only, like ``messages``."""

from __future__ import annotations

from typing import Any

import msgspec

from herdbook.api.history_messages import AnyId, Limit, Time
from herdbook.api.request_messages import _Request


class ListRepairs(_Request, frozen=True, kw_only=True):
    """Repair episodes that touch ``since`` .. now (open, or detected or back in service
    at or after it; default: the last 7 days), with their percentiles and the fleet's
    availability over the same window."""

    since: Time | None = None
    pool: AnyId = ""
    kind: str = ""
    """A fault kind: xid, ecc_dbe, thermal, health, down, failed, validation, ..."""
    node_id: AnyId = ""
    limit: Limit = 1000
    """The newest N episodes listed (the summary counts them all)."""


class RepairsReply(msgspec.Struct, frozen=True, kw_only=True):
    since: str
    until: str
    items: list[dict[str, Any]]
    """Each episode: its steps with time and actor, and its four durations in seconds."""
    omitted: int = 0
    summary: dict[str, Any]
    """Percentiles (p50, p90, p99, max, mean, count) of time_to_quarantine,
    time_to_drain, time_in_repair and mttr over the episodes back in service: ``fleet``,
    per pool (``pools``) and fault kind (``kinds``); ``episodes`` and ``open`` counts."""
    availability: dict[str, Any]
    """GPU-hours (node-hours) owned and in service over the window; per pool."""
    as_of_seq: int = 0
