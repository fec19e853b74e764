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
"""The most refused messages one chain report names (``refused_total`` counts them all);
the same for the events anchored only through one."""


class ChainVerifier:
    """Walks node events in stream order and checks each vouched event's ``prev_hash``.

    The chain is the vouched events': a link is the SHA-256 of the node's last *vouched*
    event before it as stored (None for its first). Linked so, a vouched event that
    changed or vanished breaks its successor's link wherever refused messages sit, and
    only that does: a message its subject does not vouch for (undecodable, a type or node
    its subject does not carry: the projector dead-letters it) is *refused*, listed with
    its sequence and reason, never a link and never a break, whether it stays, is taken
    out or was put in.

    A link onto the refused message just before it is accepted too: it is what
    ``EventStore`` writes while it hashes whatever is last on the node's subjects
    instead of reading past refused messages. It anchors nothing before that message,
    so the vouched event it skipped is listed as *unanchored* (a change to it would not
    be seen) instead of passed over in silence. The first break per node is kept."""

    def __init__(self) -> None:
        self.last_hash: dict[str, str] = {}
        """The hash of the last message on each node's subjects, refused or not."""
        self.vouched: dict[str, tuple[int, str]] = {}
        """Each node's last vouched event: its sequence and hash."""
        self.refused_since: dict[str, int] = {}
        """Nodes whose last message is refused: the first refused one since their last
        vouched event."""
        self.nodes: set[str] = set()
        self.broken: dict[str, dict[str, Any]] = {}
        self.refused: list[dict[str, Any]] = []
        self.refused_total = 0
        self.unanchored: list[dict[str, Any]] = []
        self.unanchored_total = 0
        self.events = 0

    def add(self, entry: LogEntry) -> None:
        event = entry.event
        digest = hashlib.sha256(entry.data).hexdigest()
        if isinstance(event, NodeEvent):
            self._link(entry, event, tag(event))
            self.vouched[event.node_id] = (entry.seq, digest)
            self.refused_since.pop(event.node_id, None)
            self.last_hash[event.node_id] = digest
            return
        node_id = node_id_of_subject(entry.subject)
        self.refused_total += 1
        if len(self.refused) < MAX_REFUSED:
            self.refused.append({"node_id": printable(node_id, 140), "seq": entry.seq,
                                 "subject": printable(entry.subject, 140),
                                 "reason": printable(entry.refused or "refused", 200)})
        self.refused_since.setdefault(node_id, entry.seq)
        self.last_hash[node_id] = digest

    def _link(self, entry: LogEntry, event: NodeEvent, name: str) -> None:
        node_id = event.node_id
        self.nodes.add(node_id)
        self.events += 1
        before = self.vouched.get(node_id)
        expected = None if before is None else before[1]
        if event.prev_hash == expected:
            return
        refused = self.refused_since.get(node_id)
        if refused is not None and event.prev_hash == self.last_hash.get(node_id):
            # chained onto the refused message before it (the store's rule until it read
            # past them): accepted, and what it skipped is said to be unanchored
            if before is not None:
                self.unanchored_total += 1
                if len(self.unanchored) < MAX_REFUSED:
                    self.unanchored.append({"node_id": node_id, "seq": before[0],
                                            "refused_seq": refused, "next_seq": entry.seq})
            return
        if node_id not in self.broken:
            self.broken[node_id] = {"node_id": node_id, "seq": entry.seq,
                                    "event": name, "expected": expected,
                                    "found": event.prev_hash}

    def report(self) -> dict[str, Any]:
        broken = sorted(self.broken.values(), key=lambda b: b["seq"])
        return {"ok": not broken, "nodes_checked": len(self.nodes),
                "events_checked": self.events, "broken": broken,
                "refused": self.refused, "refused_total": self.refused_total,
                "unanchored": self.unanchored, "unanchored_total": self.unanchored_total}
