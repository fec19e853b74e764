"""The agent's catch-up read, on the wire: ``herd.sync.<node>.allocs`` (request/reply).

An agent holds no JetStream consumer (DESIGN §9: no per-agent server state, and no
consumer an agent's credentials could point at another node). It follows its own
allocation events with a core subscription and, after every start, reconnect and event,
asks the control plane for what it has not folded yet. The node served is the one the
request's subject names: the only one the agent's credentials may publish for.
"""

from __future__ import annotations

from typing import Annotated

import msgspec


class SyncRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    after: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Send the node's allocation events stored after this stream sequence."""


class SyncedEvent(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    subject: str
    data: msgspec.Raw
    """The event's JSON exactly as stored: the agent binds it to ``subject`` itself."""


class SyncReply(msgspec.Struct, kw_only=True):
    events: list[SyncedEvent] = []
    last: int = 0
    """Every event up to this sequence was read (refused ones are not sent)."""
    more: bool = False
    """Not everything fitted: ask again after the last sequence received."""
    error: str = ""


sync_request_decoder = msgspec.json.Decoder(SyncRequest)
sync_reply_decoder = msgspec.json.Decoder(SyncReply)
