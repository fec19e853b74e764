"""History, time travel and the audit trail: everything here is read from HERD_EVENTS.

Pure pieces (no I/O): ``parse_time``, the cause chain (``CauseIndex``,
``build_history``), the time-travel fold (``NodesAt``), audit filtering (``audit_row``)
and the hash-chain check (``ChainVerifier``). The async readers (``scan_log`` and the
functions below it) and the API routes (``HistoryRoutes``) wrap them.

Guarantees and costs:
- A read covers the stream up to the last sequence matching its subject *at call
  time*: later appends are not waited for.
- Stored times are the server's (``msg.metadata.timestamp``), never a writer's clock;
  time travel takes them as non-decreasing in stream order and stops reading at the
  first event stored after the requested time.
- Every request reads the log, streaming: node history twice over ``herd.>`` (pass
  one finds the cause trees the node's events belong to, holding only the ids of events
  that have a cause; pass two keeps those trees' members), verify once over
  ``herd.node.>`` (one hash per node held), time travel over ``herd.node.>`` up to the
  time (the folded views held), the audit list over ``herd.>`` (its newest rows held).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from herdbook.config import parse_duration
from herdbook.control.lookup import ApiError, resolve
from herdbook.control.present import iso, node_json
from herdbook.events.alloc import AllocEvent, AllocLost, AllocRequeueApproved
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.codec import AnyEvent, event_tag
from herdbook.events.eval_events import EvalCreated
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.jobs import JobDeregistered, JobEvent, JobRegistered
from herdbook.events.node import NodeBootChecked, NodeClaimed, NodeEvent, NodeReleased
from herdbook.events.states import Health, resolve_state_filter
from herdbook.events.subjects import (
    EVENTS_STREAM,
    aggregate_filter,
    node_id_of_subject,
    validate_id,
)
from herdbook.projector.node_view import NodeView, apply
from herdbook.reactors.health import ACTOR as HEALTH_ACTOR

IDLE_TIMEOUT = 30.0
"""A read fails when no message arrived for this long before it reached its end."""
REPLY_BYTES = 700_000
MAX_ITEMS = 5000
ALL_EVENTS = "herd.>"
NODE_EVENTS = "herd.node.>"


class LogEntry(NamedTuple):
    seq: int
    stored_at: datetime
    subject: str
    data: bytes
    event: AnyEvent | None
    """None if the bytes do not decode (a forged or foreign message)."""


# -- TIME ----------------------------------------------------------------------------


def parse_time(text: str, now: datetime) -> datetime:
    """ISO-8601 (``2026-11-21T10:00:00Z``; without an offset it is UTC) or a duration
    ago (``10m``, ``2h``, ``1d``, a bare number is seconds). Raises ValueError."""
    word = text.strip()
    try:
        return now - timedelta(seconds=float(parse_duration(word)))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(word)
    except ValueError:
        raise ValueError(f"invalid time {text!r}: write ISO-8601 (2026-11-21T10:00:00Z) "
                         "or a duration ago (10m, 2h, 1d)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


# -- READING THE LOG -----------------------------------------------------------------


async def last_message(js: JetStreamContext, subject: str,
                       stream: str = EVENTS_STREAM) -> tuple[int, datetime | None]:
    """Sequence and stored time of the last message on ``subject`` (0, None if none)."""
    try:
        msg = await js.get_last_msg(stream, subject)
    except NotFoundError:
        return 0, None
    return int(msg.seq or 0), msg.time


async def scan_log(js: JetStreamContext, subject: str, on_entry: Callable[[LogEntry], None],
                   *, start_seq: int = 1, start_time: datetime | None = None,
                   until: datetime | None = None, last: int | None = None,
                   stream: str = EVENTS_STREAM, idle_timeout: float = IDLE_TIMEOUT) -> int:
    """Call ``on_entry`` for every message on ``subject`` in stream order, from
    ``start_seq`` (or the first stored at or after ``start_time``) up to ``last`` (by
    default the subject's last sequence now), stopping early at the first message stored
    after ``until``. Returns the last sequence the read covered.

    An ordered push consumer with a callback (as ``EventStore.load``): the callback only
    decodes and hands over, so it keeps up with the server."""
    top, top_time = await last_message(js, subject, stream)
    last = top if last is None else min(last, top)
    if last < start_seq or (start_time is not None
                            and (top_time is None or top_time < start_time)):
        return last
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal seen
        if done.done():
            return
        seen += 1
        meta = msg.metadata
        seq = meta.sequence.stream
        if seq > last or (until is not None and meta.timestamp > until):
            done.set_result(None)
            return
        try:
            event: AnyEvent | None = bind_event(msg.subject, msg.data)
        except Unvouched:
            event = None   # shown as what it is: raw bytes its subject does not vouch for
        try:
            on_entry(LogEntry(seq, meta.timestamp, msg.subject, msg.data, event))
        except Exception as err:  # noqa: BLE001 - handed to the waiting reader
            done.set_exception(err)
            return
        if seq >= last:
            done.set_result(None)

    if start_time is not None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                opt_start_time=start_time)
    elif start_seq > 1:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                                opt_start_seq=start_seq)
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    sub = await js.subscribe(subject, stream=stream, cb=on_msg, ordered_consumer=True,
                             config=config)
    try:
        while not done.done():
            before = seen
            await asyncio.wait([done], timeout=idle_timeout)
            if not done.done() and seen == before:
                raise TimeoutError(f"reading {stream} ({subject}) stalled: nothing arrived "
                                   f"for {idle_timeout:g}s")
        done.result()
    finally:
        await sub.unsubscribe()
    return last


async def read_log(js: JetStreamContext, subject: str, **options: Any) -> list[LogEntry]:
    """``scan_log`` into a list: (seq, stored time, subject, raw bytes, decoded event)."""
    out: list[LogEntry] = []
    await scan_log(js, subject, out.append, **options)
    return out


# -- THE CAUSE CHAIN -----------------------------------------------------------------


def tag(event: AnyEvent) -> str:
    """``node.down``, ``alloc.lost``: the event's type, without the alloc id of a subject."""
    return event_tag(type(event))


def _where(event: AnyEvent) -> str | None:
    return event.node_id if isinstance(event, NodeEvent | AllocEvent) else None


def label(event: AnyEvent, node_id: str, count: int = 1) -> str:
    """How an event reads in a chain: ``node.health_changed (fatal)``,
    ``eval.created node-update``, ``alloc.placed ×2 on gpu-2`` (another node)."""
    text = tag(event) + (f" ×{count}" if count > 1 else "")
    if isinstance(event, NodeHealthChanged):
        text += " (fatal)" if event.fatal else f" ({event.health.value.lower()})"
    elif isinstance(event, EvalCreated):
        text += f" {event.triggered_by.value}"
    elif isinstance(event, JobEvent):
        text += f" {event.job_id}"
    where = _where(event)
    if where is not None and where != node_id:
        text += f" on {where}"
    return text


_XID = re.compile(r"\bXID \d+")


def external_label(cause: str, effect: AnyEvent) -> str:
    """A cause that is not an event of HERD_EVENTS: a health report (HERD_HEALTH), or
    an event this read did not cover."""
    if effect.actor == HEALTH_ACTOR:
        xid = _XID.search(getattr(effect, "reason", ""))
        return f"health report {cause}" + (f" ({xid.group(0)})" if xid else "")
    return f"{cause} (not in {EVENTS_STREAM})"


class CauseIndex:
    """The root cause of every event, fed in stream order.

    A cause is always appended before its effects, so one forward pass knows each
    event's root: its own id if it has no ``causation_id``, else its cause's root (an
    allocation placed by an eval has the eval's id as cause: the eval's ``created``
    event stands for it). Only events with a cause, and evals, take memory."""

    def __init__(self) -> None:
        self._roots: dict[str, str] = {}

    def root(self, event: AnyEvent) -> str:
        cause = event.causation_id
        return event.event_id if cause is None else self._roots.get(cause, cause)

    def add(self, event: AnyEvent) -> str:
        root = self.root(event)
        if event.causation_id is not None:
            self._roots[event.event_id] = root
        if isinstance(event, EvalCreated):
            self._roots.setdefault(event.eval_id, root)
        return root


def is_nodes(event: AnyEvent | None, node_id: str) -> bool:
    return isinstance(event, NodeEvent) and event.node_id == node_id


def build_history(node_id: str, entries: Iterable[LogEntry]) -> dict[str, Any]:
    """The node's events with their causes and effects across aggregates.

    ``items``: one per node event: ``caused_by`` is its direct cause's label, ``caused``
    every event it caused, transitively. ``chains``: for each cause tree a node event
    is part of (with a cause or an effect), the tree as indented lines, root first,
    pruned to the paths through the node's events; equal siblings read ``×N``."""
    by_key: dict[str, LogEntry] = {}      # event id, and eval id -> its created event
    parent: dict[str, str] = {}           # event id -> key of its cause
    children: dict[str, list[LogEntry]] = defaultdict(list)
    externals: dict[str, str] = {}        # key of a cause outside the log -> its label
    mine: list[LogEntry] = []
    for entry in sorted(entries, key=lambda e: e.seq):
        event = entry.event
        if event is None:
            continue
        cause = event.causation_id
        if cause is not None:
            found = by_key.get(cause)
            if found is not None and found.event is not None:
                key = found.event.event_id
            else:
                key = f"ext:{cause}"
                externals.setdefault(key, external_label(cause, event))
            parent[event.event_id] = key
            children[key].append(entry)
        by_key.setdefault(event.event_id, entry)
        if isinstance(event, EvalCreated):
            by_key.setdefault(event.eval_id, entry)
        if is_nodes(event, node_id):
            mine.append(entry)

    def name(key: str, count: int = 1) -> str:
        if key in externals:
            return externals[key]
        event = by_key[key].event
        assert event is not None
        return label(event, node_id, count)

    def ancestors(event_id: str) -> list[str]:
        chain: list[str] = []
        key = parent.get(event_id)
        while key is not None and key not in chain:
            chain.append(key)
            key = parent.get(key)
        return chain[::-1]

    def descendants(key: str) -> list[LogEntry]:
        out: list[LogEntry] = []
        stack = list(reversed(children.get(key, [])))
        seen: set[str] = set()
        while stack:
            entry = stack.pop()
            assert entry.event is not None
            if entry.event.event_id in seen:
                continue
            seen.add(entry.event.event_id)
            out.append(entry)
            stack.extend(reversed(children.get(entry.event.event_id, [])))
        return out

    items: list[dict[str, Any]] = []
    roots: list[str] = []
    relevant: set[str] = set()
    for entry in mine:
        event = entry.event
        assert event is not None
        up = ancestors(event.event_id)
        down = descendants(event.event_id)
        items.append({
            "seq": entry.seq, "at": iso(entry.stored_at), "event": tag(event),
            "actor": event.actor, "reason": reason_of(event), "event_id": event.event_id,
            "causation_id": event.causation_id,
            "caused_by": name(up[-1]) if up else None,
            "caused": [{"event_id": d.event.event_id, "event": tag(d.event), "seq": d.seq,
                        "on": _where(d.event)} for d in down if d.event is not None],
        })
        if up or down:
            root = up[0] if up else event.event_id
            if root not in roots:
                roots.append(root)
            relevant.update(up)
            relevant.add(event.event_id)
            relevant.update(d.event.event_id for d in down if d.event is not None)

    def body(key: str, depth: int) -> list[str]:
        """The lines under ``key``: each child once, equal siblings counted."""
        groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for child in children.get(key, []):
            assert child.event is not None
            child_id = child.event.event_id
            if child_id in relevant:
                sig = (name(child_id), tuple(body(child_id, depth + 1)))
                groups.setdefault(sig, []).append(child_id)
        lines: list[str] = []
        for (_, below), ids in groups.items():
            lines.append("  " * depth + "→ " + name(ids[0], len(ids)))
            lines.extend(below)
        return lines

    chains = [{"root": name(root), "lines": [name(root), *body(root, 1)]} for root in roots]
    return {"node_id": node_id, "items": items, "chains": chains}


# -- TIME TRAVEL ---------------------------------------------------------------------


class NodesAt:
    """Every node as the projector had it after the last event stored at or before
    ``at``, folded as the entries arrive; ``seq`` is that event's sequence."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.views: dict[str, NodeView] = {}
        self.seq = 0

    def add(self, entry: LogEntry) -> None:
        event = entry.event
        if entry.stored_at > self.at or not isinstance(event, NodeEvent):
            return
        new = apply(self.views.get(event.node_id), event, entry.seq)
        if new is None:
            self.views.pop(event.node_id, None)
        else:
            self.views[event.node_id] = new
        self.seq = entry.seq


def fold_nodes(entries: Iterable[LogEntry], at: datetime) -> tuple[dict[str, NodeView], int]:
    fold = NodesAt(at)
    for entry in entries:
        fold.add(entry)
    return fold.views, fold.seq


def node_at_json(view: NodeView, wide: bool = True) -> dict[str, Any]:
    """``node_json`` of a past view: heartbeats and allocations are not in the event
    log, so their fields are null."""
    out = node_json(view, None, 0.0, wide=wide)
    out.update(heartbeating=None, allocations=None)
    return out


# -- AUDIT ---------------------------------------------------------------------------

NOISE = frozenset({"node.info_updated", "node.wipe_step"})


def reason_of(event: AnyEvent) -> str:
    reason = getattr(event, "reason", "")
    if isinstance(reason, str) and reason:
        return reason
    if isinstance(event, NodeBootChecked):
        failed = [f"{k}: {v}" for k, v in event.checks.items() if v != "ok"]
        return "boot check passed" if event.passed else "boot check failed: " + "; ".join(failed)
    if isinstance(event, NodeClaimed | NodeReleased) and event.user:
        return f"user {event.user}"
    if isinstance(event, JobRegistered):
        return f"version {event.version}, count {event.spec.count}"
    return ""


def is_audited(event: AnyEvent | None) -> bool:
    """Who did what to nodes and jobs: every node event but the agent's info updates and
    wipe steps, allocations lost for good (not requeued) and an operator's requeue of
    one, job (de)registrations."""
    if isinstance(event, NodeEvent):
        return tag(event) not in NOISE
    if isinstance(event, AllocLost):
        return not event.requeue_allowed
    return isinstance(event, AllocRequeueApproved | JobRegistered | JobDeregistered)


def audit_row(entry: LogEntry) -> dict[str, Any] | None:
    event = entry.event
    if event is None or not is_audited(event):
        return None
    target = (f"alloc {event.alloc_id}" if isinstance(event, AllocEvent)
              else f"job {event.job_id}" if isinstance(event, JobEvent) else None)
    return {"seq": entry.seq, "at": iso(entry.stored_at), "actor": event.actor,
            "action": tag(event), "node": _where(event), "target": target,
            "reason": reason_of(event), "event_id": event.event_id}


class ChainVerifier:
    """Walks node events in stream order and checks each ``prev_hash`` against the
    SHA-256 of the node's previous stored event (None for its first). A message without
    it, or that does not decode, breaks the chain; the first break per node is kept."""

    def __init__(self) -> None:
        self.last_hash: dict[str, str] = {}
        self.broken: dict[str, dict[str, Any]] = {}
        self.events = 0

    def add(self, entry: LogEntry) -> None:
        event = entry.event
        node_id = event.node_id if isinstance(event, NodeEvent) else node_id_of_subject(
            entry.subject)
        expected = self.last_hash.get(node_id)
        found = event.prev_hash if isinstance(event, NodeEvent) else None
        if (found != expected or not isinstance(event, NodeEvent)) and node_id not in self.broken:
            self.broken[node_id] = {
                "node_id": node_id, "seq": entry.seq,
                "event": tag(event) if event is not None else "undecodable",
                "expected": expected, "found": found}
        self.last_hash[node_id] = hashlib.sha256(entry.data).hexdigest()
        self.events += 1

    def report(self) -> dict[str, Any]:
        broken = sorted(self.broken.values(), key=lambda b: b["seq"])
        return {"ok": not broken, "nodes_checked": len(self.last_hash),
                "events_checked": self.events, "broken": broken}


# -- ASYNC READERS -------------------------------------------------------------------


async def node_history(js: JetStreamContext, node_id: str) -> dict[str, Any]:
    """``build_history`` over the members of the cause trees the node's events are in:
    pass one finds those trees' roots, pass two (up to the same sequence) keeps them."""
    index = CauseIndex()
    wanted: set[str] = set()

    def find(entry: LogEntry) -> None:
        if entry.event is not None:
            root = index.add(entry.event)
            if is_nodes(entry.event, node_id):
                wanted.add(root)

    last = await scan_log(js, ALL_EVENTS, find)
    kept: list[LogEntry] = []

    def keep(entry: LogEntry) -> None:
        if entry.event is not None and index.root(entry.event) in wanted:
            kept.append(entry._replace(data=b""))

    if wanted:
        await scan_log(js, ALL_EVENTS, keep, last=last)
    return build_history(node_id, kept)


async def nodes_at(js: JetStreamContext, at: datetime) -> tuple[dict[str, NodeView], int]:
    fold = NodesAt(at)
    await scan_log(js, NODE_EVENTS, fold.add, until=at)
    return fold.views, fold.seq


async def audit_list(js: JetStreamContext, node_id: str | None = None,
                     since: datetime | None = None,
                     limit: int = MAX_ITEMS) -> tuple[list[dict[str, Any]], int]:
    """The newest ``limit`` audit rows in stream order, and how many there were."""
    subjects = ([aggregate_filter("node", node_id), aggregate_filter("alloc", node_id)]
                if node_id else [ALL_EVENTS])
    rows: deque[dict[str, Any]] = deque(maxlen=limit)
    total = 0

    def on_entry(entry: LogEntry) -> None:
        nonlocal total
        row = audit_row(entry)
        if row is not None:
            rows.append(row)
            total += 1

    kept: list[dict[str, Any]] = []
    for subject in subjects:
        await scan_log(js, subject, on_entry, start_time=since)
        kept.extend(rows)
        rows.clear()
    return sorted(kept, key=lambda r: r["seq"])[-limit:], total


async def verify(js: JetStreamContext, node_id: str | None = None) -> dict[str, Any]:
    verifier = ChainVerifier()
    await scan_log(js, aggregate_filter("node", node_id) if node_id else NODE_EVENTS,
                   verifier.add)
    return verifier.report()


# -- API -----------------------------------------------------------------------------


class HistoryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str = ""
    node_id: str = ""
    at: datetime | None = None
    since: datetime | None = None
    limit: int = 1000
    wide: bool = True
    filter_approval: list[str] = []
    filter_state: list[str] = []
    labels: dict[str, str] = {}
    next_token: str | None = None


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


class HistoryRoutes:
    """``node.history``, ``node.list_at``, ``node.describe_at``, ``audit.list``,
    ``audit.verify``. Each request reads the log (see the module docstring)."""

    def __init__(self, nc: NATS, views: Callable[[], Mapping[str, NodeView]]) -> None:
        self.js = nc.jetstream()
        self.views = views
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

    async def history(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=HistoryRequest)
        node_id = await self._node_id(req.id)
        result: dict[str, Any] = await self._read(node_history(self.js, node_id))
        if not result["items"]:
            raise ApiError("not_found", f"node {node_id} has no events")
        items = result["items"]
        result["items"] = newest_fitting(items, req.limit)
        result["omitted"] = len(items) - len(result["items"])
        return result

    async def _nodes_at(self, at: datetime) -> tuple[dict[str, NodeView], int]:
        """The fold at ``at``, kept for the next request at the same time while the
        node events did not move (``node list --at`` follows pages)."""
        top, _ = await last_message(self.js, NODE_EVENTS)
        key = (at, top)
        if self._at_cache is None or self._at_cache[0] != key:
            self._at_cache = (key, await self._read(nodes_at(self.js, at)))
        return self._at_cache[1]

    async def describe_at(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=HistoryRequest)
        at = _utc(req.at or datetime.now(UTC))
        views, seq = await self._nodes_at(at)
        try:
            view: NodeView = resolve(views, req.id, "node")
        except ApiError as err:
            if err.code != "not_found":
                raise
            raise ApiError("not_found", f"node {req.id} did not exist at {iso(at)}") from None
        return {**node_at_json(view), "at": iso(at), "as_of_seq": seq}

    async def list_at(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=HistoryRequest)
        at = _utc(req.at or datetime.now(UTC))
        approvals = {a.upper() for a in req.filter_approval}
        if approvals - {"PENDING", "APPROVED", "REJECTED"}:
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
        return {"items": page, "next_token": page[-1]["id"] if more and page else None,
                "at": iso(at), "as_of_seq": seq}

    async def audit_list(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=HistoryRequest)
        node_id = await self._node_id(req.node_id) if req.node_id else None
        since = _utc(req.since) if req.since else None
        limit = max(1, min(req.limit, MAX_ITEMS))
        rows, total = await self._read(audit_list(self.js, node_id, since, limit))
        items = newest_fitting(rows, limit)
        return {"items": items, "omitted": total - len(items)}

    async def audit_verify(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=HistoryRequest)
        node_id = await self._node_id(req.node_id) if req.node_id else None
        report: dict[str, Any] = await self._read(verify(self.js, node_id))
        report["broken"] = report["broken"][:MAX_ITEMS]
        return report
