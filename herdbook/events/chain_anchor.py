"""What a node event's ``prev_hash`` names: the node's last *vouched* event, found past the
refused messages stored after it.

A message its subject does not vouch for (``authority.bind_event``: undecodable, another
type or node; the projector dead-letters it) is never a link of the chain
(``history.audit.ChainVerifier``). An event chained onto the last vouched event keeps that
event anchored wherever refused messages sit: changed or removed, it breaks the link. One
chained onto the refused bytes instead anchors nothing before them (``verify`` lists the
event it skipped as unanchored).

Reading past a refused message takes reads by sequence on the node's subjects, which the
control plane's credentials allow and an agent's (its node's last message by subject
only) do not.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from herdbook.events.authority import Unvouched, bind_event

MAX_PAST = 1000
"""The most of a node's messages read past its last one to find its last vouched event;
beyond, the event chains onto the refused bytes (and ``verify`` says what that left
unanchored): a flood of refused messages costs each append at most this many reads."""
FIRST_WINDOW = 64
"""Stream sequences searched back first; each next window is 4 times wider."""


def vouched(subject: str, data: bytes) -> bool:
    try:
        bind_event(subject, data)
    except Unvouched:
        return False
    return True


async def chain_anchor(js: JetStreamContext, stream: str, filt: str, seq: int, subject: str,
                       data: bytes, *, max_past: int = MAX_PAST) -> bytes | None:
    """The bytes the next event on ``filt`` (one node's subjects) chains onto, given the
    last message there (``seq``, ``subject``, ``data``): that message if its subject
    vouches for it, else the last vouched one before it; None if the node has none (its
    first event). Past ``max_past`` refused messages, the last message's bytes.

    Searches back in windows of stream sequences (64, 256, ...), reading the node's
    messages in each forward with ``next_by_subj``: every read is of this node's
    messages, however busy the stream around them."""
    if vouched(subject, data):
        return data
    read = 0
    end = seq            # every message of the node in [end, seq] is refused
    window = FIRST_WINDOW
    while end > 1:
        start = max(1, end - window)
        found: bytes | None = None
        at = start
        while True:
            try:
                msg = await js.get_msg(stream, seq=at, subject=filt, next=True)
            except NotFoundError:
                break
            msg_seq = int(msg.seq or 0)
            if msg_seq >= end:
                break
            read += 1
            if read > max_past:
                return data
            if vouched(str(msg.subject), msg.data or b""):
                found = msg.data or b""
            at = msg_seq + 1
        if found is not None:
            return found
        end = start
        window *= 4
    return None
