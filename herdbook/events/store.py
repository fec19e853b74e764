"""The JetStream event store: append with optimistic concurrency, load, subscribe.

Guarantees:
- ``append`` sends the event id as ``Nats-Msg-Id``: a resend inside the duplicate
  window is stored once and returns the original sequence.
- With ``expected_version`` (the stream sequence of the aggregate's last event the
  writer decided from, 0 for "no events yet") the server refuses the write if any
  subject of the aggregate got a newer event: ``ConflictError``.
- NATS out of storage is ``StorageFullError``, at once: JetStream's own answer (10023
  "insufficient resources": a write past ``max_file_store``), or, where the writer can
  see the store's disk (``storage_full``, the embedded server), a full disk, which
  nats-server answers with silence.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats.errors
from msgspec.structs import replace
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, Header
from nats.js.errors import APIError, NotFoundError

from herdbook.backoff import Backoff
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.base import Event
from herdbook.events.batch import (
    ATOMIC_DISABLED,
    CONTAINS_DUPLICATE,
    INFLIGHT,
    MAX_BATCH,
    RETRY_CODES,
    Message,
    publish_batch_framed,
)
from herdbook.events.chain_anchor import chain_anchor
from herdbook.events.codec import AnyEvent, encode
from herdbook.events.feed import StreamFeed
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import EVENTS_STREAM, aggregate_filter, event_subject, printable

log = logging.getLogger(__name__)

EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
CONFLICT_CODES = frozenset({10071, 10164})
CHAIN_ATTEMPTS = 20
RETRYABLE_CODES = frozenset({10163})
TIMEOUT_RETRY = Backoff(0.2, factor=1.0, step=0.2)
"""An append that timed out (or found no responders) is sent again after 0.2 s, 0.4 ..."""
CODE_RETRY = Backoff(0.05, factor=1.0, step=0.05)
"""... one answered with a ``RETRYABLE_CODES`` code after 0.05 s, 0.1 ... (a short race)."""
STORAGE_FULL_CODES = frozenset({10023, 10047})
"""JetStream's "insufficient resources" (the server's storage limit reached) and
"insufficient storage resources available" (a stream or its reservation does not fit)."""


class ConflictError(Exception):
    """Someone else appended to this aggregate first: reload, decide again."""

    def __init__(self, aggregate_filter: str, expected: int, detail: str = "") -> None:
        super().__init__(f"conflict on {aggregate_filter}: expected last sequence {expected}"
                         + (f" ({detail})" if detail else ""))
        self.aggregate_filter = aggregate_filter
        self.expected = expected


class StorageFullError(Exception):
    """NATS cannot store anything more: its storage is full. The message is one line
    for the operator, beginning with "NATS storage full"."""


def storage_full_error(err: APIError) -> StorageFullError | None:
    """The ``StorageFullError`` JetStream's error ``err`` means, if it means that."""
    if err.err_code in STORAGE_FULL_CODES or "no space left" in (err.description or ""):
        return StorageFullError(f"NATS storage full: JetStream answered {err.description!r} "
                                f"(error {err.err_code}); appends resume once it has space")
    return None


def subject_of(event: Event) -> str:
    return event_subject(type(event).aggregate, event.aggregate_id, event.event_name)


def log_appended(events: Sequence[Event]) -> None:
    """One info line per decision appended (an event's, or the count of each kind for
    several: a plan's part is hundreds of placements); each event at debug level."""
    if not events:
        return
    first = events[0]
    if len(events) == 1:
        log.info("%s %s by %s: %s", first.aggregate_id, first.event_name, first.actor,
                 getattr(first, "reason", ""))
        return
    if log.isEnabledFor(logging.INFO):
        kinds = Counter(type(event).__name__ for event in events)
        log.info("%s: %s by %s", first.aggregate_id,
                 ", ".join(f"{count} {name}" for name, count in kinds.items()), first.actor)
    if log.isEnabledFor(logging.DEBUG):
        for event in events:
            log.debug("%s %s by %s: %s", event.aggregate_id, event.event_name, event.actor,
                      getattr(event, "reason", ""))


class EventStore:
    def __init__(self, nc: NATS, stream: str = EVENTS_STREAM,
                 timeout: float = 5.0, attempts: int = 4, *, direct: bool = False,
                 storage_full: Callable[[], str | None] | None = None) -> None:
        """``nc``: the client itself, not a ``JetStreamContext``: an atomic batch and a
        feed write and read on the client, which a context has no public way to name."""
        self.nc = nc
        self.js = nc.jetstream()
        self.storage_full = storage_full
        """Why NATS cannot store right now (its disk is full), or None: an append then
        fails at once instead of waiting for acknowledgements that will not come."""
        self.direct = direct
        """Read an aggregate's last event with a direct get whose subject names it (what
        an agent's credentials allow: its own node only). A replica may answer slightly
        behind; the append's expected sequence then conflicts and the chain is retried."""
        self.stream = stream
        self.timeout = timeout
        self.attempts = attempts
        self.atomic = True
        """Whether the stream takes atomic batches (until it answers that it does not)."""
        self._batches = asyncio.Semaphore(INFLIGHT)

    async def append(self, event: Event, expected_version: int | None = None) -> int:
        """Append one event; return its stream sequence. A node event is chained: it
        carries the SHA-256 of the node's previous event (``prev_hash``)."""
        self._check_storage()
        if isinstance(event, NodeEvent) and event.prev_hash is None:
            return await self._append_chained(event, expected_version)
        return await self._append(event, expected_version)

    async def _append_chained(self, event: NodeEvent, expected_version: int | None) -> int:
        """Read the node's last event, hash its last vouched one (``chain_anchor``: past
        refused messages) into ``prev_hash``, and append expecting exactly that last
        event: a writer that got in between breaks no link, it makes us chain again (or,
        if the caller decided from a version, raises the conflict). An agent's store
        (``direct``) reads no further back than the last message and hashes it."""
        filt = aggregate_filter("node", event.node_id)
        for _ in range(CHAIN_ATTEMPTS):
            last_seq, last_subject, last_data, last_id = await self._last(filt)
            if last_id == event.event_id:
                return last_seq    # a resend of ours that already landed
            if expected_version is not None and last_seq != expected_version:
                raise ConflictError(filt, expected_version, f"last is {last_seq}")
            anchor = last_data if last_data is None or self.direct else await chain_anchor(
                self.js, self.stream, filt, last_seq, last_subject, last_data)
            prev = hashlib.sha256(anchor).hexdigest() if anchor is not None else None
            try:
                return await self._append(replace(event, prev_hash=prev), last_seq)
            except ConflictError:
                if expected_version is not None:
                    raise
        raise ConflictError(filt, expected_version or 0, "the node kept changing")

    async def _last(self, filt: str) -> tuple[int, str, bytes | None, str | None]:
        try:
            msg = await self.js.get_last_msg(self.stream, filt, direct=self.direct)
        except NotFoundError:
            return 0, "", None, None
        return (int(msg.seq or 0), str(msg.subject or ""), msg.data or b"",
                (msg.headers or {}).get(Header.MSG_ID))

    async def _append(self, event: Event, expected_version: int | None = None) -> int:
        subject = subject_of(event)
        filt = aggregate_filter(type(event).aggregate, event.aggregate_id)
        headers: dict[str, Any] = {Header.MSG_ID.value: event.event_id}
        if expected_version is not None:
            headers[Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value] = str(expected_version)
            headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = filt
        data = encode(event)

        async def send() -> int:
            ack = await self.js.publish(subject, data, timeout=self.timeout,
                                        stream=self.stream, headers=headers)
            return int(ack.seq)

        return await self._acked(send, filt, expected_version, event.event_id,
                                 RETRYABLE_CODES)

    async def _acked(self, send: Callable[[], Awaitable[int]], filt: str,
                     expected_version: int | None, last_id: str, retry: frozenset[int],
                     refused: Callable[[APIError], Awaitable[int | None]] | None = None) -> int:
        """``send()`` (one append or one atomic batch, whose last event is ``last_id``)
        until it is acknowledged: a timeout or no responders is sent again (after a
        pause; our own event found stored answers a conflict that follows), a code of
        ``retry`` too; ``refused`` may answer another error; a full NATS storage is
        ``StorageFullError``, a stale expectation ``ConflictError``."""
        timed_out = False
        for attempt in range(self.attempts):
            try:
                return await send()
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                timed_out = True
                self._check_storage()
                if attempt + 1 == self.attempts:
                    raise
                await asyncio.sleep(TIMEOUT_RETRY.nth(attempt))
                continue
            except APIError as caught:
                err = caught
            full = storage_full_error(err)
            if full is not None:
                raise full from err
            if refused is not None and (answer := await refused(err)) is not None:
                return answer
            if err.err_code in CONFLICT_CODES:
                # A resend of a write that landed: a single server checks the
                # expectation before dedupe. Find our own event id.
                if timed_out and (landed := await self._landed_seq(filt, last_id)) is not None:
                    return landed
                raise ConflictError(filt, expected_version or 0, err.description or "") from err
            if err.err_code in retry and attempt + 1 < self.attempts:
                await asyncio.sleep(CODE_RETRY.nth(attempt))
                continue
            raise err
        raise AssertionError("unreachable")

    def _check_storage(self) -> None:
        why = self.storage_full() if self.storage_full is not None else None
        if why is not None:
            raise StorageFullError(why)

    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int:
        """Append what one decision produced, in order, each expecting the previous one:
        a ConflictError on the first means someone else moved the aggregate first (the
        decision is stale); later ones cannot conflict unless someone interleaves.
        Returns the sequence of the last event (``expected_version`` if none)."""
        version = expected_version
        for event in events:
            version = await self.append(event, expected_version=version)
        log_appended(events)
        return version

    async def append_batch(self, events: Sequence[Event], expected_version: int) -> int:
        """What ``append_decided`` does, as one atomic batch publish with one ack: the
        first message expects ``expected_version`` (a stale one is a ``ConflictError``
        and stores nothing), every message keeps its event id as ``Nats-Msg-Id`` (a
        resend that had landed returns the sequence stored). One aggregate's events
        only. Chained node events, more than ``MAX_BATCH`` events, or a stream without
        ``allow_atomic`` go through ``append_decided``."""
        if not events:
            return expected_version
        return await self.append_atomic([(events, expected_version)])

    async def append_atomic(self, parts: Sequence[tuple[Sequence[Event], int]]) -> int:
        """Several decisions, each one aggregate's events and the version it was decided
        from, as one atomic batch publish with one ack; return the stream sequence of
        the last event (0 if there is none). Each part's first message expects its
        version: one stale part is a ``ConflictError`` and nothing of the batch is
        stored (nats-server checks every expectation against the stream as it was
        before the batch). Every message keeps its event id as ``Nats-Msg-Id``: a
        resend that had landed returns the sequence stored. Two parts of one aggregate
        are refused (``ValueError``): the second's expectation could not see the first.
        Chained node events, more than ``MAX_BATCH`` events, or a stream without
        ``allow_atomic``: each part through ``append_decided``, in order."""
        parts = [(events, expected) for events, expected in parts if events]
        if not parts:
            return 0
        keys = [(type(events[0]).aggregate, events[0].aggregate_id) for events, _ in parts]
        filters = [aggregate_filter(*key) for key in keys]
        for key, filt, (events, _) in zip(keys, filters, parts, strict=True):
            if any((type(e).aggregate, e.aggregate_id) != key for e in events):
                raise ValueError(f"an atomic batch holds one aggregate's events per part ({filt})")
        if len(set(filters)) != len(filters):
            raise ValueError("an atomic batch holds at most one part per aggregate")
        if (not self.atomic or sum(len(events) for events, _ in parts) > MAX_BATCH
                or any(isinstance(e, NodeEvent) and e.prev_hash is None
                       for events, _ in parts for e in events)):
            return await self._one_part_at_a_time(parts)
        self._check_storage()
        messages: list[Message] = []
        for filt, (events, expected) in zip(filters, parts, strict=True):
            first = len(messages)
            messages += [Message(subject_of(e), encode(e), {Header.MSG_ID.value: e.event_id})
                         for e in events]
            messages[first].headers.update({
                Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value: str(expected),
                EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: filt})
        # A conflict or a duplicate is checked on the last part: batches land whole.
        last_filt, last_id = filters[-1], parts[-1][0][-1].event_id
        expected_last = parts[-1][1] if len(parts) == 1 else None

        async def send() -> int:
            async with self._batches:
                ack = await publish_batch_framed(self.nc, messages, self.timeout)
            if ack.error is not None:
                raise APIError(code=ack.error.code, err_code=ack.error.err_code,
                               description=ack.error.description)
            return ack.seq

        async def refused(err: APIError) -> int | None:
            if err.err_code == ATOMIC_DISABLED:
                log.warning("stream %s refuses atomic batches; appending one by one",
                            self.stream)
                self.atomic = False
                return await self._one_part_at_a_time(parts)
            if err.err_code == CONTAINS_DUPLICATE:
                return await self._landed_batch(last_filt, last_id, messages[-1])
            return None

        try:
            seq = await self._acked(send, last_filt, expected_last, last_id, RETRY_CODES,
                                    refused)
        except ConflictError as err:
            if len(parts) == 1:
                raise
            why = err.__cause__.description if isinstance(err.__cause__, APIError) else ""
            raise ConflictError(f"one of {len(parts)} aggregates ({filters[0]} .. "
                                f"{last_filt})", 0, why or "") from err
        if self.atomic:
            for events, _ in parts:
                log_appended(events)
        return seq

    async def _one_part_at_a_time(self, parts: Sequence[tuple[Sequence[Event], int]]) -> int:
        seq = 0
        for events, expected in parts:
            seq = await self.append_decided(events, expected)
        return seq

    async def _landed_batch(self, filt: str, last_id: str, last: Message) -> int:
        """The sequence of a batch that had landed (the server refused its resend whole):
        the aggregate's last message if it is ours, else the duplicate ack of the last
        message sent alone (batches land whole, so it is stored and deduplicated)."""
        landed = await self._landed_seq(filt, last_id)
        if landed is not None:
            return landed
        ack = await self.js.publish(last.subject, last.data, timeout=self.timeout,
                                    stream=self.stream,
                                    headers={Header.MSG_ID.value: last_id})
        return int(ack.seq)

    async def _landed_seq(self, filt: str, event_id: str) -> int | None:
        try:
            msg = await self.js.get_last_msg(self.stream, filt, direct=self.direct)
        except NotFoundError:
            return None
        if (msg.headers or {}).get(Header.MSG_ID) == event_id:
            return int(msg.seq or 0)
        return None

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int:
        """Stream sequence of the aggregate's last event, 0 if it has none."""
        try:
            msg = await self.js.get_last_msg(self.stream, aggregate_filter(aggregate, aggregate_id))
        except NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def load(self, aggregate: str, aggregate_id: str) -> list[tuple[int, AnyEvent]]:
        """Every event of one aggregate, in order, with its stream sequence."""
        last = await self.last_sequence(aggregate, aggregate_id)
        if last == 0:
            return []
        out: list[tuple[int, AnyEvent]] = []
        done = asyncio.get_running_loop().create_future()

        async def on_msg(msg: Msg) -> None:
            seq = msg.metadata.sequence.stream
            try:
                out.append((seq, bind_event(msg.subject, msg.data)))
            except Unvouched as err:
                log.warning("skipping %s seq %d: %s", printable(msg.subject, 120), seq, err)
            if seq >= last and not done.done():
                done.set_result(None)

        sub = await self.js.subscribe(
            aggregate_filter(aggregate, aggregate_id), stream=self.stream, cb=on_msg,
            ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        )
        try:
            await asyncio.wait_for(done, timeout=max(10.0, self.timeout))
        finally:
            await sub.unsubscribe()
        return out

    async def subscribe(self, from_seq: int, cb: Callable[[Msg], Awaitable[None]],
                        subject: str = "herd.>") -> StreamFeed:
        """Callback-driven reading from ``from_seq`` (1 = the beginning), with backpressure."""
        feed = StreamFeed(self.nc, self.stream, subject, from_seq, cb)
        await feed.start()
        return feed


async def stream_last_seq(js: JetStreamContext, stream: str) -> int:
    info = await js.stream_info(stream)
    return int(info.state.last_seq)
