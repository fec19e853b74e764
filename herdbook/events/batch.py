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
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

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
