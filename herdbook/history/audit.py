"""The audit trail: who did what to nodes, allocations and jobs, and the nodes' hash
chains. Pure: fed ``LogEntry``s in stream order, no I/O (``queries`` reads them)."""

from __future__ import annotations

import hashlib
from typing import Any

from herdbook.events.alloc import AllocEvent, AllocLost, AllocRequeueApproved
from herdbook.events.codec import AnyEvent
from herdbook.events.job_events import JobDeregistered, JobEvent, JobRegistered
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import node_id_of_subject, printable
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


MAX_REFUSED = 500
"""The most refused messages one chain report names (``refused_total`` counts them all)."""


class ChainVerifier:
    """Walks node events in stream order and checks each vouched event's ``prev_hash``
    against the SHA-256 of the message stored before it on the node's subjects (None
    for its first): what ``EventStore`` hashed when it appended it.

    A message its subject does not vouch for (undecodable, a type or node its subject
    does not carry: the projector dead-letters it) is *refused*: listed with its
    sequence and reason, never a break. It cannot be taken out (HERD_EVENTS denies
    delete), and an event appended after it chains onto its bytes, so its hash is what
    the next vouched event must carry. Only a vouched event whose ``prev_hash`` is not
    the hash of the message before it breaks the chain (an event changed or removed,
    or one published around the store); the first break per node is kept."""

    def __init__(self) -> None:
        self.last_hash: dict[str, str] = {}
        self.nodes: set[str] = set()
        self.broken: dict[str, dict[str, Any]] = {}
        self.refused: list[dict[str, Any]] = []
        self.refused_total = 0
        self.events = 0

    def add(self, entry: LogEntry) -> None:
        event = entry.event
        node_id = event.node_id if isinstance(event, NodeEvent) else node_id_of_subject(
            entry.subject)
        if isinstance(event, NodeEvent):
            expected = self.last_hash.get(node_id)
            if event.prev_hash != expected and node_id not in self.broken:
                self.broken[node_id] = {"node_id": node_id, "seq": entry.seq,
                                        "event": tag(event), "expected": expected,
                                        "found": event.prev_hash}
            self.nodes.add(node_id)
            self.events += 1
        else:
            self.refused_total += 1
            if len(self.refused) < MAX_REFUSED:
                self.refused.append({"node_id": printable(node_id, 140), "seq": entry.seq,
                                     "subject": printable(entry.subject, 140),
                                     "reason": printable(entry.refused or "refused", 200)})
        self.last_hash[node_id] = hashlib.sha256(entry.data).hexdigest()

    def report(self) -> dict[str, Any]:
        broken = sorted(self.broken.values(), key=lambda b: b["seq"])
        return {"ok": not broken, "nodes_checked": len(self.nodes),
                "events_checked": self.events, "broken": broken,
                "refused": self.refused, "refused_total": self.refused_total}
