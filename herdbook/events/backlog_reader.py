"""Catching up on a stream's backlog at the speed of the fold, not of the client.

``BacklogReader`` reads what a stream held when a reader started (the projector's
rebuild or restart), in the process that folds it. It is a pull consumer minus nats-py's
per-message work (a regex per frame, a ``Msg``, header parsing, a queue and a task hop):
on a 200k-event backlog here it read 390-455k msg/s
(benchmarks/view_rebuild.py, docs/performance.md). It takes its inbox's frames raw from
the client's narrow parser (``narrow_parser.py``: ``sid_routes`` one frame at a time,
``sid_batches`` a run of its consumer's deliveries at a time); ``StreamFeed`` (live)
routes its own inbox through the same parser, one frame at a time. Where nats-py's
private parts are not as expected (or ``HERD_NATS_PRIVATE=off``; ``nats_private``) the
reader takes its deliveries as ``Msg`` through a subscription callback instead (slower,
the same messages); tests/unit/test_backlog_parser.py and
tests/integration/test_backlog_reader.py pin both. The reader pulls from an ephemeral
consumer at most ``2 * batch`` ahead of the callback.

Guarantees, as ``StreamFeed``'s: sequences strictly increasing, each at most once;
nothing heard for ``expires + 2s`` (server restarted, consumer lost) or a 409 status:
a new consumer resumes at the last delivered sequence + 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from herdbook.events import nats_private
from herdbook.events.narrow_parser import Frames, Route, Run, run_of, sid_batches, sid_routes

log = logging.getLogger(__name__)

OnMsg = Callable[[str, bytes, int], Awaitable[None] | None]
"""(subject, data, stream sequence) -> None, or an awaitable the reader awaits first."""
OnBatch = Callable[[Frames], Awaitable[None] | None]
"""What a reader hands its consumer instead of one ``OnMsg`` call per message."""


class BacklogReader:
    def __init__(self, nc: NATS, stream: str, subject: str | None, start_seq: int, end_seq: int,
                 on_msg: OnMsg, *, batch: int = 2000, expires: float = 5.0,
                 on_batch: OnBatch | None = None) -> None:
        """``on_batch``, if given, takes most messages a run at a time (``_cut``) instead of
        ``on_msg`` one at a time: the same messages, in the same order. ``subject``: the
        consumer's filter; None for the whole stream, which is what to pass when the filter
        would cover the stream anyway: nats-server 2.15 delivered a 60k-event backlog of
        3,000 subjects at ~25k msg/s through the filter ``herd.>`` and at ~410k without
        one (benchmarks/view_rebuild.py, docs/performance.md)."""
        self.nc = nc
        self.js = nc.jetstream()
        self.stream = stream
        self.subject = subject
        self.end_seq = end_seq
        self.on_msg = on_msg
        self.on_batch: OnBatch = on_batch or self._one_by_one
        self.batch = batch
        self.expires = expires
        self.last_seq = max(0, start_seq - 1)
        self.error: BaseException | None = None
        self._consumer: str | None = None
        self._sub: Any = None
        self._outstanding = 0
        self._heard = time.monotonic()
        self._done = asyncio.Event()

    async def run(self) -> int:
        """Deliver every message up to ``end_seq`` (or the stream's end, if that came
        first); return the last sequence delivered. An error of ``on_msg`` stops the
        reader and is raised here."""
        if self.last_seq >= self.end_seq:
            return self.last_seq
        narrow = nats_private.enabled()
        routes: dict[int, Route] = {}
        batches: dict[int, Run] = {}
        if narrow:
            self._sub = await self.nc.subscribe(self.nc.new_inbox())
            routes, batches = sid_routes(self.nc), sid_batches(self.nc)
        else:   # nats-py's own parser and a Msg per delivery (nats_private)
            self._sub = await self.nc.subscribe(self.nc.new_inbox(), cb=self._on_delivery,
                                                pending_msgs_limit=4 * self.batch + 100)
        sid = nats_private.sid_of(self._sub)
        routes[sid] = self._on_frame
        try:
            await self._create()
            while not self._done.is_set():
                try:
                    await asyncio.wait_for(self._done.wait(), 1.0)
                except TimeoutError:
                    if time.monotonic() - self._heard > self.expires + 2.0:
                        log.info("backlog of %s: nothing heard; resuming at %d",
                                 self.stream, self.last_seq + 1)
                        await self._recreate()
        finally:
            routes.pop(sid, None)
            batches.pop(sid, None)
            await self._drop()
        if self.error is not None:
            raise self.error
        return self.last_seq

    async def _create(self) -> None:
        self._heard = time.monotonic()
        info = await self.js.add_consumer(self.stream, ConsumerConfig(
            name=f"herd-backlog-{uuid.uuid4().hex}", ack_policy=AckPolicy.NONE,
            filter_subject=self.subject, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.last_seq + 1, inactive_threshold=120.0, mem_storage=True,
            num_replicas=1, max_waiting=16))
        self._consumer = info.name
        if self._sub is not None and nats_private.enabled():   # runs of its deliveries
            sid = nats_private.sid_of(self._sub)
            sid_batches(self.nc)[sid] = run_of(sid, self.stream, info.name, self._on_batch)
        self._outstanding = 0
        if not info.num_pending:
            self._done.set()
            return
        await self._request(2 * self.batch)

    async def _recreate(self) -> None:
        consumer, self._consumer = self._consumer, None
        await self._delete(consumer)
        try:
            await self._create()
        except Exception as err:  # noqa: BLE001 - the server is not back yet: try again
            log.debug("backlog of %s: cannot create a consumer: %s", self.stream, err)
            self._heard = time.monotonic() - self.expires

    async def _drop(self) -> None:
        consumer, self._consumer = self._consumer, None
        sub, self._sub = self._sub, None
        try:
            await sub.unsubscribe()
        except Exception:  # noqa: BLE001 - the connection may be gone
            pass
        await self._delete(consumer)

    async def _delete(self, consumer: str | None) -> None:
        if consumer is not None and self.nc.is_connected:
            try:
                await self.js.delete_consumer(self.stream, consumer)
            except Exception:  # noqa: BLE001 - it expires by itself (inactive_threshold)
                pass

    async def _request(self, batch: int) -> None:
        if self._consumer is None or self._sub is None:
            return
        self._outstanding += batch
        body = json.dumps({"batch": batch, "expires": int(self.expires * 1e9)}).encode()
        try:
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}",
                                  body, reply=self._sub.subject)
        except Exception as err:  # noqa: BLE001 - disconnected: the watchdog recreates
            self._outstanding -= batch
            log.debug("backlog of %s: pull request failed: %s", self.stream, err)

    def _on_frame(self, subject: bytes, reply: bytes, data: bytes,
                  headers: bytes | None) -> Awaitable[None] | None:
        """One frame of the reader's inbox, called by the parser; returns what the parser
        must await before the next frame (a pull request, a dead letter), else None."""
        self._heard = time.monotonic()
        if self._done.is_set():
            return None
        if not reply:   # a status: b"NATS/1.0 408 Request Timeout\r\n..."
            return self._on_status(headers[9:12] if headers else b"")
        self._outstanding -= 1
        tokens = reply.split(b".")
        if len(tokens) == 9:
            seq, pending = int(tokens[5]), int(tokens[8])
        else:
            seq, pending = int(tokens[7]), int(tokens[10])
        if seq > self.last_seq:
            self.last_seq = seq
            return self._hand(self.on_msg, (subject.decode(), data, seq), seq, pending)
        return self._next(seq, pending)

    async def _on_delivery(self, msg: Msg) -> None:
        """A delivery to the reader's inbox through nats-py's subscription (the public
        path, ``nats_private``): the same handling as a frame from the narrow parser."""
        if not msg.reply:   # a status: nats-py parsed its headers
            self._heard = time.monotonic()
            if not self._done.is_set():
                await self._on_status((msg.headers or {}).get("Status", "").encode())
            return
        more = self._on_frame(msg.subject.encode(), msg.reply.encode(), msg.data, None)
        if more is not None:
            await more

    def _on_batch(self, frames: Frames, pending: int) -> Awaitable[None] | None:
        """A run of deliveries (``_cut``: sequences increasing), called by the parser."""
        self._heard = time.monotonic()
        if self._done.is_set():
            return None
        self._outstanding -= len(frames)
        if frames[0][1] <= self.last_seq:   # redelivered by a consumer reset
            frames = [frame for frame in frames if frame[1] > self.last_seq]
            if not frames:
                return None
        if frames[-1][1] > self.end_seq:    # the end, and what was stored since: stop at it
            cut = next(i for i, frame in enumerate(frames) if frame[1] >= self.end_seq)
            frames, pending = frames[:cut + 1], 0
        seq = self.last_seq = frames[-1][1]
        if self.on_batch == self._one_by_one:
            self.last_seq = frames[0][1] - 1   # moved message by message
        return self._hand(self.on_batch, (frames,), seq, pending)

    def _hand(self, take: Callable[..., Awaitable[None] | None], args: tuple[Any, ...],
              seq: int, pending: int) -> Awaitable[None] | None:
        """Give ``args`` to ``take`` (``on_msg`` or ``on_batch``), then ask for more once
        what it returned is awaited; its error stops the reader (raised by ``run``)."""
        try:
            more = take(*args)
        except Exception as err:  # noqa: BLE001 - raised by run(), not in nats-py's loop
            self._fail(err)
            return None
        if more is not None:
            return self._then(more, seq, pending)
        return self._next(seq, pending)

    def _one_by_one(self, frames: Frames, start: int = 0) -> Awaitable[None] | None:
        """``on_batch`` for a reader given only ``on_msg`` (``last_seq``: the one it was
        given last, as one frame at a time)."""
        on_msg = self.on_msg
        for i in range(start, len(frames)):
            subject, seq, data = frames[i]
            self.last_seq = seq
            more = on_msg(subject.decode(), bytes(data), seq)
            if more is not None:
                return self._one_by_one_after(more, frames, i + 1)
        return None

    async def _one_by_one_after(self, more: Awaitable[None], frames: Frames, start: int) -> None:
        await more
        rest = self._one_by_one(frames, start)
        if rest is not None:
            await rest

    async def _then(self, more: Awaitable[None], seq: int, pending: int) -> None:
        try:
            await more
        except Exception as err:  # noqa: BLE001 - raised by run(), not in nats-py's loop
            self._fail(err)
            return
        after = self._next(seq, pending)
        if after is not None:
            await after

    def _next(self, seq: int, pending: int) -> Awaitable[None] | None:
        if seq >= self.end_seq or pending == 0:
            self._done.set()
        elif self._outstanding <= self.batch:
            return self._request(self.batch)
        return None

    def _fail(self, err: BaseException) -> None:
        self.error = err
        self._done.set()

    async def _on_status(self, status: bytes) -> None:
        if status in (b"404", b"408"):   # a request expired: ask again
            self._outstanding = 0
            await self._request(2 * self.batch)
        elif status != b"100":           # 409 consumer deleted, 503: start over
            self._heard = 0.0
