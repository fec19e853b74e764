"""Time travel: every node as the projector had it at a past time, by the same pure
fold (``node_fold.apply``) over the stored events up to that time. No I/O: the read side
(``herdbook.history.queries.nodes_at``) feeds it from the log."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Protocol

from herdbook.events.codec import AnyEvent
from herdbook.events.node import NodeEvent
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView


class Stored(Protocol):
    """A stored event as the log reader hands it over (``history.reader.LogEntry``)."""

    @property
    def seq(self) -> int: ...
    @property
    def stored_at(self) -> datetime: ...
    @property
    def event(self) -> AnyEvent | None: ...


class NodesAsOf:
    """Every node as the projector had it after the last event stored at or before
    ``at``, folded as the entries arrive in stream order; ``seq`` is that event's
    sequence. Stored times are taken as non-decreasing in stream order."""

    def __init__(self, at: datetime) -> None:
        self.at = at
        self.nodes: dict[str, NodeView] = {}
        self.seq = 0

    def add(self, entry: Stored) -> None:
        event = entry.event
        if entry.stored_at > self.at or not isinstance(event, NodeEvent):
            return
        new = apply(self.nodes.get(event.node_id), event, entry.seq)
        if new is None:
            self.nodes.pop(event.node_id, None)
        else:
            self.nodes[event.node_id] = new
        self.seq = entry.seq


def fold_nodes(entries: Iterable[Stored], at: datetime) -> tuple[dict[str, NodeView], int]:
    """The nodes at ``at`` and the sequence of the last event folded (0: none)."""
    fold = NodesAsOf(at)
    for entry in entries:
        fold.add(entry)
    return fold.nodes, fold.seq
