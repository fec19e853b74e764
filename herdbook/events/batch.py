"""One aggregate's events as one atomic batch publish (nats-server >= 2.12, ADR-50; the
stream needs ``allow_atomic``): every message carries ``Nats-Batch-Id`` and
``Nats-Batch-Sequence``, the first also the expected version, the last
``Nats-Batch-Commit: 1``; only the last is a request, and its reply is the one ack.

Guarantees (checked against nats-server 2.15.1 in tests/integration/test_batch_append.py):
- All or nothing: a stale expected version (10071) rejects the whole batch and stores
  nothing; other writers cannot interleave with it.
- A resend of a batch that landed is refused whole (10201, "contains duplicate message
  id"), since every message keeps its event id as ``Nats-Msg-Id``.
- Up to ``MAX_BATCH`` (1000) messages; at most ``streamMaxAtomicBatchInflightPerStream``
  (50) batches in flight per stream, so a store sends at most ``INFLIGHT`` at a time.

Two writers of that wire: ``publish_batch`` (nats-py's public API, one ``publish`` per
message) and ``publish_batch_framed`` (the store's: every message but the last written
as one command through ``nats_private``, falling back to the first).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from herdbook.events import nats_private
from herdbook.events.subjects import printable

BATCH_ID = "Nats-Batch-Id"
BATCH_SEQUENCE = "Nats-Batch-Sequence"
BATCH_COMMIT = "Nats-Batch-Commit"
MAX_BATCH = 1000
INFLIGHT = 32
"""Batches one store has in flight: below the server's 50 per stream, leaving room."""

ATOMIC_DISABLED = 10174
INCOMPLETE = 10176
CONTAINS_DUPLICATE = 10201
TOO_MANY_INFLIGHT = 10210
RETRY_CODES = frozenset({INCOMPLETE, TOO_MANY_INFLIGHT, 10163})
"""A batch lost a message (a reconnect), the server holds too many open batches, or a
cluster's "try again": send it again under a new batch id."""


@dataclass(frozen=True)
class Message:
    subject: str
    data: bytes
    headers: dict[str, str]


class BatchError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class BatchAck(msgspec.Struct):
    seq: int = 0
    count: int = 0
    error: BatchError | None = None


_ack_decoder = msgspec.json.Decoder(BatchAck)


async def publish_batch(nc: NATS, messages: Sequence[Message], timeout: float) -> BatchAck:
    """Send ``messages`` as one atomic batch under a fresh batch id; the server's answer
    to the commit (``seq`` of the last message, or ``error``). Raises nats' TimeoutError
    or NoRespondersError when no answer comes (the batch may have landed)."""
    if not 0 < len(messages) <= MAX_BATCH:
        raise ValueError(f"an atomic batch holds 1 to {MAX_BATCH} messages, not {len(messages)}")
    batch_id = uuid.uuid4().hex
    last = len(messages) - 1
    for i, msg in enumerate(messages):
        headers: dict[str, Any] = {**msg.headers, BATCH_ID: batch_id,
                                   BATCH_SEQUENCE: str(i + 1)}
        if i < last:
            await nc.publish(msg.subject, msg.data, headers=headers)
            continue
        headers[BATCH_COMMIT] = "1"
        reply = await nc.request(msg.subject, msg.data, timeout=timeout, headers=headers)
        return _ack_decoder.decode(reply.data)
    raise AssertionError("unreachable")


_HEADER_BREAK = re.compile(r"[\r\n]")


def hpub_frame(subject: str, headers: dict[str, str], data: bytes) -> bytes:
    """One ``HPUB`` frame without a reply, as nats-py's ``publish`` writes it (subjects
    and ids here are single validated tokens; a header value with a line break is
    refused, as nats-py strips it)."""
    if _HEADER_BREAK.search("".join(headers.values())):
        raise ValueError(f"a line break in a header value: {printable(str(headers), 160)}")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    hdr = f"NATS/1.0\r\n{head}\r\n".encode()
    return b"".join((f"HPUB {subject} {len(hdr)} {len(hdr) + len(data)}\r\n".encode(),
                     hdr, data, b"\r\n"))


async def publish_batch_framed(nc: NATS, messages: Sequence[Message], timeout: float) -> BatchAck:
    """``publish_batch``'s wire (one batch id, ``Nats-Batch-Sequence`` 1..n, the last
    message a request with ``Nats-Batch-Commit: 1``) with every message but the last
    written as one command: nats-py's ``publish`` builds and checks each message's
    headers on its own, a cost per event that a plan of thousands pays on the event loop
    the projector folds on. Raises nats' TimeoutError or NoRespondersError when no
    answer comes (the batch may have landed). Leans on nats-py's private ``_send_command``
    (what ``publish`` itself calls; the request that follows flushes it) through
    ``nats_private``; where that is not usable, ``publish_batch`` (public API, one
    ``publish`` per message). Pinned by tests/integration/test_placement_batches.py."""
    if not 0 < len(messages) <= MAX_BATCH:
        raise ValueError(f"an atomic batch holds 1 to {MAX_BATCH} messages, not {len(messages)}")
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError
    if not nats_private.enabled():
        return await publish_batch(nc, messages, timeout)
    batch_id = uuid.uuid4().hex
    *body, last = messages
    if body:
        await nats_private.send_command(nc, b"".join(
            hpub_frame(m.subject, {**m.headers, BATCH_ID: batch_id, BATCH_SEQUENCE: str(i)},
                       m.data) for i, m in enumerate(body, 1)))
    reply = await nc.request(last.subject, last.data, timeout=timeout, headers={
        **last.headers, BATCH_ID: batch_id, BATCH_SEQUENCE: str(len(messages)),
        BATCH_COMMIT: "1"})
    return _ack_decoder.decode(reply.data)
