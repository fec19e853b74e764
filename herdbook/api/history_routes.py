"""The API routes of the read side: ``node.history``, ``node.list_at``,
``node.describe_at``, ``audit.list``, ``audit.verify``. Each decodes its request, runs a
query of ``herdbook.history`` (which reads the log: see ``history.queries`` for the
costs) and shapes the reply to fit NATS's max_payload."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from herdbook.api.history_messages import (
    AuditList,
    AuditPage,
    AuditVerify,
    ChainReport,
    NodeAt,
    NodeHistory,
    NodeHistoryReply,
    NodesAt,
    PastNodesPage,
)
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.present import node_json
from herdbook.clock import Clock
from herdbook.events.states import Approval, Health, resolve_state_filter
from herdbook.events.subjects import aggregate_filter, validate_id
from herdbook.history.queries import MAX_ITEMS, audit_list, node_history, nodes_at, verify
from herdbook.history.reader import NODE_EVENTS, last_message
from herdbook.history.times import iso
from herdbook.projector.node_view import NodeView

REPLY_BYTES = 700_000


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def fitting(items: list[dict[str, Any]], limit: int,
            budget: int = REPLY_BYTES) -> list[dict[str, Any]]:
    """The first ``limit`` items whose JSON fits in ``budget`` bytes (a reply stays under
    NATS's max_payload); at least one."""
    kept: list[dict[str, Any]] = []
    size = 0
    for item in items[:max(1, min(limit, MAX_ITEMS))]:
        size += len(msgspec.json.encode(item)) + 1
        if kept and size > budget:
            break
        kept.append(item)
    return kept


def newest_fitting(items: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    return fitting(items[::-1], limit)[::-1]


def node_at_json(view: NodeView, wide: bool = True) -> dict[str, Any]:
    """``node_json`` of a past view: heartbeats and allocations are not in the event
    log, so their fields are null."""
    out = node_json(view, None, 0.0, clock=None, wide=wide)
    out.update(heartbeating=None, allocations=None)
    return out


class HistoryRoutes:
    """``node.history``, ``node.list_at``, ``node.describe_at``, ``audit.list``,
    ``audit.verify``: the requests and replies of ``history_messages``. Each request
    reads the log. ``clock``: what "now" is for a request without a time."""

    def __init__(self, nc: NATS, views: Callable[[], Mapping[str, NodeView]], *,
                 clock: Clock) -> None:
        self.js = nc.jetstream()
        self.views = views
        self.clock = clock
        self._at_cache: tuple[tuple[datetime, int], tuple[dict[str, NodeView], int]] | None = None

    def routes(self) -> dict[str, Callable[[bytes], Awaitable[Any]]]:
        return {"node.history": self.history, "node.list_at": self.list_at,
                "node.describe_at": self.describe_at, "audit.list": self.audit_list,
                "audit.verify": self.audit_verify}

    async def _node_id(self, ident: str) -> str:
        """A node id with events in the log (a deleted node too), or a unique prefix of
        one in today's view."""
        views = self.views()
        if ident in views or (await last_message(self.js, aggregate_filter(
                "node", validate_id(ident))))[0]:
            return ident
        view: NodeView = resolve(views, ident, "node")
        return view.id

    async def _read(self, reader: Awaitable[Any]) -> Any:
        try:
            return await reader
        except TimeoutError as err:
            raise ApiError("unavailable", str(err)) from err

    async def history(self, data: bytes) -> NodeHistoryReply:
        req = decode(data, NodeHistory)
        node_id = await self._node_id(req.id)
        result: dict[str, Any] = await self._read(node_history(self.js, node_id))
        if not result["items"]:
            raise ApiError("not_found", f"node {node_id} has no events")
        items = result["items"]
        result["items"] = newest_fitting(items, req.limit)
        result["omitted"] = len(items) - len(result["items"])
        return msgspec.convert(result, NodeHistoryReply)

    async def _nodes_at(self, at: datetime) -> tuple[dict[str, NodeView], int]:
        """The fold at ``at``, kept for the next request at the same time while the
        node events did not move (``node list --at`` follows pages)."""
        top, _ = await last_message(self.js, NODE_EVENTS)
        key = (at, top)
        if self._at_cache is None or self._at_cache[0] != key:
            self._at_cache = (key, await self._read(nodes_at(self.js, at)))
        return self._at_cache[1]

    async def describe_at(self, data: bytes) -> dict[str, Any]:
        req = decode(data, NodeAt)
        at = _utc(req.at or self.clock.now())
        views, seq = await self._nodes_at(at)
        try:
            view: NodeView = resolve(views, req.id, "node")
        except ApiError as err:
            if err.code != "not_found":
                raise
            raise ApiError("not_found", f"node {req.id} did not exist at {iso(at)}") from None
        return {**node_at_json(view), "at": iso(at), "as_of_seq": seq}

    async def list_at(self, data: bytes) -> PastNodesPage:
        req = decode(data, NodesAt, empty=True)
        at = _utc(req.at or self.clock.now())
        approvals = {a.upper() for a in req.filter_approval}
        if approvals - set(Approval):
            raise ApiError("bad_request", "unknown approval; choose from pending, approved, "
                                          "rejected")
        states = resolve_state_filter(req.filter_state) if req.filter_state else None
        views, seq = await self._nodes_at(at)
        items = [node_at_json(view, req.wide) for node_id, view in sorted(views.items())
                 if (req.next_token is None or node_id > req.next_token)
                 and (not approvals or view.approval.value in approvals)
                 and (states is None or view.state in states
                      or ("UNHEALTHY" in states and view.health is Health.UNHEALTHY))
                 and all(view.info.labels.get(k) == v for k, v in req.labels.items())]
        page = fitting(items, req.limit)
        more = len(page) < len(items)
        return PastNodesPage(items=page, next_token=page[-1]["id"] if more and page else None,
                             at=iso(at), as_of_seq=seq)

    async def audit_list(self, data: bytes) -> AuditPage:
        req = decode(data, AuditList, empty=True)
        node_id = await self._node_id(req.node_id) if req.node_id else None
        since = _utc(req.since) if req.since else None
        limit = max(1, min(req.limit, MAX_ITEMS))
        rows, total = await self._read(audit_list(self.js, node_id, since, limit))
        items = newest_fitting(rows, limit)
        return msgspec.convert({"items": items, "omitted": total - len(items)}, AuditPage)

    async def audit_verify(self, data: bytes) -> ChainReport:
        req = decode(data, AuditVerify, empty=True)
        node_id = await self._node_id(req.node_id) if req.node_id else None
        report: dict[str, Any] = await self._read(verify(self.js, node_id))
        report["broken"] = report["broken"][:MAX_ITEMS]
        return msgspec.convert(report, ChainReport)
