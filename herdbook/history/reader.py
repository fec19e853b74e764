"""The one reader of HERD_EVENTS for the read side: a subject filter, a sequence or time
range, each message bound to its subject.

Guarantees and costs:
- A read covers the stream up to the last sequence matching its subject *at call
  time*: later appends are not waited for.
- Stored times are the server's (``msg.metadata.timestamp``), never a writer's clock;
  a read bounded by ``until`` takes them as non-decreasing in stream order and stops at
  the first message stored after it.
- A message its subject does not vouch for (``bind_event`` refuses it: forged, foreign
  or garbage) is handed over with ``event=None``, its raw bytes and why it was refused
  (``refused``): the hash-chain check lists it, every other query skips it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.codec import AnyEvent
from herdbook.events.subjects import EVENTS_STREAM

IDLE_TIMEOUT = 30.0
"""A read fails when no message arrived for this long before it reached its end."""
ALL_EVENTS = "herd.>"
NODE_EVENTS = "herd.node.>"


class LogEntry(NamedTuple):
    seq: int
    stored_at: datetime
    subject: str
    data: bytes
    event: AnyEvent | None
    """None if its subject does not vouch for the bytes (a forged or foreign message)."""
    refused: str = ""
    """Why the subject does not vouch for it (``Unvouched``: the projector's dead-letter
    reason), or empty for an event."""


def entry_of(seq: int, stored_at: datetime, subject: str, data: bytes) -> LogEntry:
    """A stored message as the read side sees it: bound to its subject, or dead."""
    try:
        event: AnyEvent | None = bind_event(subject, data)
    except Unvouched as err:
        return LogEntry(seq, stored_at, subject, data, None, str(err) or "refused")
    return LogEntry(seq, stored_at, subject, data, event)


async def last_message(js: JetStreamContext, subject: str,
                       stream: str = EVENTS_STREAM) -> tuple[int, datetime | None]:
    """Sequence and stored time of the last message on ``subject`` (0, None if none)."""
    try:
        msg = await js.get_last_msg(stream, subject)
    except NotFoundError:
        return 0, None
    return int(msg.seq or 0), msg.time


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _deliver_from(start_seq: int, start_time: datetime | None) -> ConsumerConfig:
    if start_time is not None and start_time <= EPOCH:
        # nothing is stored before 1970, and a consumer asked to start before it never
        # answers (nats-server takes the negative Unix time): from the first message
        start_time = None
    if start_time is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                              opt_start_time=start_time)
    if start_seq > 1:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=start_seq)
    return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)


async def scan_log(js: JetStreamContext, subject: str, on_entry: Callable[[LogEntry], None],
                   *, start_seq: int = 1, start_time: datetime | None = None,
                   until: datetime | None = None, last: int | None = None,
                   stream: str = EVENTS_STREAM, idle_timeout: float = IDLE_TIMEOUT) -> int:
    """Call ``on_entry`` for every message on ``subject`` in stream order, from
    ``start_seq`` (or the first stored at or after ``start_time``) up to ``last`` (by
    default the subject's last sequence now), stopping early at the first message stored
    after ``until``. Returns the last sequence the read covered. An exception from
    ``on_entry`` ends the read and is raised here.

    An ordered push consumer with a callback (as ``EventStore.load``): the callback only
    binds and hands over, so it keeps up with the server."""
    top, top_time = await last_message(js, subject, stream)
    last = top if last is None else min(last, top)
    if last < start_seq or (start_time is not None
                            and (top_time is None or top_time < start_time)):
        return last
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen = 0

    async def on_msg(msg: Msg) -> None:
        nonlocal seen
        if done.done():
            return
        seen += 1
        meta = msg.metadata
        seq = meta.sequence.stream
        if seq > last or (until is not None and meta.timestamp > until):
            done.set_result(None)
            return
        try:
            on_entry(entry_of(seq, meta.timestamp, msg.subject, msg.data))
        except Exception as err:  # noqa: BLE001 - handed to the waiting reader
            done.set_exception(err)
            return
        if seq >= last:
            done.set_result(None)

    sub = await js.subscribe(subject, stream=stream, cb=on_msg, ordered_consumer=True,
                             config=_deliver_from(start_seq, start_time))
    try:
        while not done.done():
            before = seen
            await asyncio.wait([done], timeout=idle_timeout)
            if not done.done() and seen == before:
                raise TimeoutError(f"reading {stream} ({subject}) stalled: nothing arrived "
                                   f"for {idle_timeout:g}s")
        done.result()
    finally:
        await sub.unsubscribe()
    return last


async def read_log(js: JetStreamContext, subject: str, **options: Any) -> list[LogEntry]:
    """``scan_log`` into a list: (seq, stored time, subject, raw bytes, bound event)."""
    out: list[LogEntry] = []
    await scan_log(js, subject, out.append, **options)
    return out
