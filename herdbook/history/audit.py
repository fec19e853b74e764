"""The audit trail: who did what to nodes, allocations and jobs, and the nodes' hash
chains. Pure: fed ``LogEntry``s in stream order, no I/O (``queries`` reads them)."""

from __future__ import annotations

import hashlib
from typing import Any

from herdbook.events.alloc import AllocEvent, AllocLost, AllocRequeueApproved
from herdbook.events.codec import AnyEvent
from herdbook.events.jobs import JobDeregistered, JobEvent, JobRegistered
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import node_id_of_subject
from herdbook.history.describe import node_of, reason_of, tag
from herdbook.history.reader import LogEntry
from herdbook.history.times import iso

NOISE = frozenset({"node.info_updated", "node.wipe_step"})


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
            "action": tag(event), "node": node_of(event), "target": target,
            "reason": reason_of(event), "event_id": event.event_id}


class ChainVerifier:
    """Walks node events in stream order and checks each ``prev_hash`` against the
    SHA-256 of the node's previous stored event (None for its first). A message without
    it, or that its subject does not vouch for, breaks the chain; the first break per
    node is kept."""

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
