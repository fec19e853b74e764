"""The read side's part of the wire: the requests and replies of ``node.history``,
``node.list_at``, ``node.describe_at``, ``audit.list`` and ``audit.verify``, imported by
the server (``api/history_routes.py``) and the CLI alike. Light: msgspec only, like
``messages``.

Ids are an id's characters here, not a view's id: the routes resolve a unique prefix, and
a node deleted from today's view still has a history. A past node (``list_at``, ``describe_at``) is
``present.node_json`` with the heartbeat and allocation fields null, so it travels as a
JSON object, not a Struct.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from herdbook.api.messages import ApprovalWord, Labels, StateWord
from herdbook.api.request_messages import _Request

Time = Annotated[datetime, Meta(tz=True, extra_json_schema={"format": "date-time"},
                                description="RFC 3339, e.g. 2026-11-21T10:00:00Z")]
"""A time in a request: msgspec decodes RFC 3339 (its schema says only ``string``)."""
NodeRef = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_-]{1,128}$",
                              description="a node id or a unique prefix of one")]
AnyId = Annotated[str, Meta(pattern=r"^([A-Za-z0-9_-]{1,128})?$",
                              description="empty (any), or an id or a unique prefix of one")]
Limit = Annotated[int, Meta(ge=1)]


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    pass


# requests -------------------------------------------------------------------------------
class NodeHistory(_Request, frozen=True, kw_only=True):
    id: NodeRef
    limit: Limit = 1000
    """The newest N events (at most 5000, and what fits in one reply)."""


class NodesAt(_Request, frozen=True, kw_only=True):
    """``node.list_at``: ``node.list``'s filters, as the event log had the nodes at
    ``at`` (default: now)."""

    at: Time | None = None
    filter_approval: list[ApprovalWord] = []
    filter_state: list[StateWord] = []
    labels: Labels = {}
    wide: bool = True
    limit: Limit = 1000
    next_token: str | None = None


class NodeAt(_Request, frozen=True, kw_only=True):
    id: NodeRef
    at: Time | None = None


class AuditList(_Request, frozen=True, kw_only=True):
    node_id: AnyId = ""
    since: Time | None = None
    limit: Limit = 1000


class AuditVerify(_Request, frozen=True, kw_only=True):
    node_id: AnyId = ""


# replies --------------------------------------------------------------------------------
class CausedEvent(_Reply, frozen=True, kw_only=True):
    event_id: str
    event: str
    seq: int
    on: str | None
    """The node it happened on, for a node or allocation event."""


class HistoryItem(_Reply, frozen=True, kw_only=True):
    seq: int
    at: str
    event: str
    actor: str
    reason: str
    event_id: str
    causation_id: str | None
    caused_by: str | None
    """The label of its direct cause."""
    caused: list[CausedEvent]
    """Every event it caused, transitively, in stream order."""


class CauseChain(_Reply, frozen=True, kw_only=True):
    root: str
    lines: list[str]
    """The tree, root first, indented; equal siblings read ``×N``."""


class NodeHistoryReply(_Reply, frozen=True, kw_only=True):
    node_id: str
    items: list[HistoryItem]
    chains: list[CauseChain]
    omitted: int
    """Older events left out (``limit``, or the reply's size)."""


class PastNodesPage(_Reply, frozen=True, kw_only=True):
    items: list[dict[str, Any]]
    next_token: str | None
    at: str
    as_of_seq: int
    """The sequence of the last event folded (0: none)."""


class AuditRow(_Reply, frozen=True, kw_only=True):
    seq: int
    at: str
    actor: str
    action: str
    node: str | None
    target: str | None
    reason: str
    event_id: str


class AuditPage(_Reply, frozen=True, kw_only=True):
    items: list[AuditRow]
    omitted: int


class BrokenLink(_Reply, frozen=True, kw_only=True):
    node_id: str
    seq: int
    event: str
    expected: str | None
    found: str | None


class RefusedMessage(_Reply, frozen=True, kw_only=True):
    """A message on a node's subjects that its subject does not vouch for (dead-lettered
    by the projector): listed, not part of the chain."""

    node_id: str
    seq: int
    subject: str
    reason: str


class UnanchoredEvent(_Reply, frozen=True, kw_only=True):
    """A vouched event whose successor chained onto the refused message after it (as a
    store that hashes whatever is last on the node's subjects writes it) instead of onto
    it: a change to it is not seen."""

    node_id: str
    seq: int
    refused_seq: int
    """The first refused message after it."""
    next_seq: int
    """The vouched event that chained onto the refused bytes instead of onto it."""


class ChainReport(_Reply, frozen=True, kw_only=True):
    ok: bool
    nodes_checked: int
    events_checked: int
    """Vouched node events whose link was checked (refused messages not counted)."""
    broken: list[BrokenLink]
    refused: list[RefusedMessage] = []
    """The first refused messages (at most 500), in stream order."""
    refused_total: int = 0
    unanchored: list[UnanchoredEvent] = []
    """The first vouched events anchored only through a refused message (at most 500)."""
    unanchored_total: int = 0
