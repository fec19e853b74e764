"""The cause chain of a node's events across aggregates: who caused what, transitively.
Pure: fed ``LogEntry``s in stream order, no I/O (``queries.node_history`` reads them)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from herdbook.events.codec import AnyEvent
from herdbook.events.eval_events import EvalCreated
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.job_events import JobEvent
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.history.describe import node_of, reason_of, tag
from herdbook.history.reader import LogEntry
from herdbook.history.times import iso
from herdbook.reactors.health import ACTOR as HEALTH_ACTOR


def label(event: AnyEvent, node_id: str, count: int = 1) -> str:
    """How an event reads in a chain: ``node.health_changed (fatal)``,
    ``eval.created node-update``, ``alloc.placed ×2 on gpu-2`` (another node)."""
    text = tag(event) + (f" ×{count}" if count > 1 else "")
    if isinstance(event, NodeHealthChanged):
        # the verdict's level where it was recorded (critical or fatal: both UNHEALTHY);
        # an older event has only ``fatal``, which a critical verdict also set then
        at_once = event.level if event.level in ("critical", "fatal") else (
            "fatal" if event.fatal and event.level is None else None)
        text += (" (GPUs)" if event.gpus_only
                 else f" ({at_once or event.health.value.lower()})")
    elif isinstance(event, EvalCreated):
        text += f" {event.triggered_by.value}"
    elif isinstance(event, JobEvent):
        text += f" {event.job_id}"
    where = node_of(event)
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


class _Tree:
    """The cause links among the entries: each event's cause, and each cause's effects."""

    def __init__(self, node_id: str, entries: Iterable[LogEntry]) -> None:
        self.node_id = node_id
        self.by_key: dict[str, LogEntry] = {}    # event id, and eval id -> its created event
        self.parent: dict[str, str] = {}         # event id -> key of its cause
        self.children: dict[str, list[LogEntry]] = defaultdict(list)
        self.externals: dict[str, str] = {}      # key of a cause outside the log -> its label
        self.mine: list[LogEntry] = []
        for entry in sorted(entries, key=lambda e: e.seq):
            if entry.event is not None:
                self._add(entry, entry.event)

    def _add(self, entry: LogEntry, event: AnyEvent) -> None:
        cause = event.causation_id
        if cause is not None:
            found = self.by_key.get(cause)
            if found is not None and found.event is not None:
                key = found.event.event_id
            else:
                key = f"ext:{cause}"
                self.externals.setdefault(key, external_label(cause, event))
            self.parent[event.event_id] = key
            self.children[key].append(entry)
        self.by_key.setdefault(event.event_id, entry)
        if isinstance(event, EvalCreated):
            self.by_key.setdefault(event.eval_id, entry)
        if is_nodes(event, self.node_id):
            self.mine.append(entry)

    def name(self, key: str, count: int = 1) -> str:
        if key in self.externals:
            return self.externals[key]
        event = self.by_key[key].event
        assert event is not None
        return label(event, self.node_id, count)

    def ancestors(self, event_id: str) -> list[str]:
        chain: list[str] = []
        key = self.parent.get(event_id)
        while key is not None and key not in chain:
            chain.append(key)
            key = self.parent.get(key)
        return chain[::-1]

    def descendants(self, key: str) -> list[LogEntry]:
        out: list[LogEntry] = []
        stack = list(reversed(self.children.get(key, [])))
        seen: set[str] = set()
        while stack:
            entry = stack.pop()
            assert entry.event is not None
            if entry.event.event_id in seen:
                continue
            seen.add(entry.event.event_id)
            out.append(entry)
            stack.extend(reversed(self.children.get(entry.event.event_id, [])))
        return out

    def body(self, key: str, depth: int, relevant: set[str]) -> list[str]:
        """The lines under ``key``: each relevant child once, equal siblings counted."""
        groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for child in self.children.get(key, []):
            assert child.event is not None
            child_id = child.event.event_id
            if child_id in relevant:
                sig = (self.name(child_id), tuple(self.body(child_id, depth + 1, relevant)))
                groups.setdefault(sig, []).append(child_id)
        lines: list[str] = []
        for (_, below), ids in groups.items():
            lines.append("  " * depth + "→ " + self.name(ids[0], len(ids)))
            lines.extend(below)
        return lines


def build_history(node_id: str, entries: Iterable[LogEntry]) -> dict[str, Any]:
    """The node's events with their causes and effects across aggregates.

    ``items``: one per node event: ``caused_by`` is its direct cause's label, ``caused``
    every event it caused, transitively. ``chains``: for each cause tree a node event
    is part of (with a cause or an effect), the tree as indented lines, root first,
    pruned to the paths through the node's events; equal siblings read ``×N``."""
    tree = _Tree(node_id, entries)
    items: list[dict[str, Any]] = []
    roots: list[str] = []
    relevant: set[str] = set()
    for entry in tree.mine:
        event = entry.event
        assert event is not None
        up = tree.ancestors(event.event_id)
        down = tree.descendants(event.event_id)
        items.append({
            "seq": entry.seq, "at": iso(entry.stored_at), "event": tag(event),
            "actor": event.actor, "reason": reason_of(event), "event_id": event.event_id,
            "causation_id": event.causation_id,
            "caused_by": tree.name(up[-1]) if up else None,
            "caused": [{"event_id": d.event.event_id, "event": tag(d.event), "seq": d.seq,
                        "on": node_of(d.event)} for d in down if d.event is not None],
        })
        if up or down:
            root = up[0] if up else event.event_id
            if root not in roots:
                roots.append(root)
            relevant.update(up)
            relevant.add(event.event_id)
            relevant.update(d.event.event_id for d in down if d.event is not None)
    chains = [{"root": tree.name(root), "lines": [tree.name(root), *tree.body(root, 1, relevant)]}
              for root in roots]
    return {"node_id": node_id, "items": items, "chains": chains}
