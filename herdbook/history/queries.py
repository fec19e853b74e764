"""History, audit and time travel as queries over the log reader (``reader.scan_log``).

Costs: every query reads the log, streaming. Node history reads ``herd.>`` twice (pass
one finds the cause trees the node's events belong to, holding only the ids of events
that have a cause; pass two keeps those trees' members), verify ``herd.node.>`` once
(one hash per node held), time travel ``herd.node.>`` up to the time (the folded views
held), the audit list ``herd.>`` or the node's subjects (its newest rows held).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Any

from nats.js import JetStreamContext

from herdbook.events.subjects import aggregate_filter
from herdbook.history.audit import ChainVerifier, audit_row
from herdbook.history.causes import CauseIndex, build_history, is_nodes
from herdbook.history.fleet_history import BUCKETS, FleetTimeline
from herdbook.history.reader import ALL_EVENTS, NODE_EVENTS, LogEntry, scan_log
from herdbook.projector.as_of import NodesAsOf
from herdbook.projector.node_view import NodeView

MAX_ITEMS = 5000
"""The most rows one audit query keeps (and one reply carries)."""


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
    """Every node as of ``at`` (by stored time) and the sequence of the last event
    folded: ``projector.as_of`` over the node events up to that time."""
    fold = NodesAsOf(at)
    await scan_log(js, NODE_EVENTS, fold.add, until=at)
    return fold.nodes, fold.seq


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
    """The hash-chain report of one node's events, or of every node's."""
    verifier = ChainVerifier()
    await scan_log(js, aggregate_filter("node", node_id) if node_id else NODE_EVENTS,
                   verifier.add)
    return verifier.report()


async def fleet_history(js: JetStreamContext, start: datetime, end: datetime,
                        buckets: int = BUCKETS) -> dict[str, Any]:
    """``FleetTimeline`` over ``herd.node.>`` up to ``end`` (one read of the node log)."""
    timeline = FleetTimeline(start, end, buckets)
    await scan_log(js, NODE_EVENTS, timeline.add, until=end)
    return timeline.result()
