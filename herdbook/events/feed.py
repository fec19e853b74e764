"""Reading a stream fast and without loss: a pull consumer with a callback on an inbox.

An ordered *push* consumer lets the server run ahead of a slow callback (a SQLite
commit), the client's pending buffer overflows, messages are dropped and the consumer
resets over and over. Here the flow control is ours: at most ``2 * batch`` messages
are requested ahead of the callback, and the next batch is requested only after the
callback has returned — backpressure all the way to the server. JETSTREAM-NOTES
measured this shape at ~119k msg/s.

The deliveries skip nats-py's per-message work (where ``nats_private`` finds nats-py's
private parts as expected; else the subscription's callback takes every delivery, as a
``Msg``): the feed's inbox is routed by sid through
the client's narrow parser (``narrow_parser.sid_routes``, shared with the backlog reader),
which hands over each frame whole without parsing a stored message's headers (nats-py
parses them character by character, the largest client cost of a live delivery). The
route only queues a ``Msg``; one task per feed calls the callback in order, so a slow
callback (a SQLite commit, a NATS request of its own) never holds the connection's read
loop. Should nats-py's own parser deliver a frame of the feed all the same (it parses
alone while no route is registered, or mid-frame), the subscription's callback puts it
in the same queue.

Guarantees:
- The callback sees stream sequences strictly increasing, each at most once.
- If nothing (not even the request-expiry status) arrives for ``expires + 5s`` — the
  server restarted, the consumer vanished — a new consumer resumes at the last
  delivered sequence + 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from herdbook.events import nats_private
from herdbook.events.narrow_parser import Route, sid_routes

log = logging.getLogger(__name__)

STATUS = "Status"
PENDING_MESSAGES = "Nats-Pending-Messages"


def ack_position(msg: Msg) -> tuple[int, int]:
    """(stream sequence, messages still pending) from a JetStream delivery's reply subject,
    without building ``msg.metadata`` (a measurable cost per message on the hot path).

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (9 tokens) or
    ``$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>.<token>``.
    """
    tokens = msg.reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[8])
    return int(tokens[7]), int(tokens[10])


def stream_seq(msg: Msg) -> int:
    return ack_position(msg)[0]


def status_headers(raw: bytes) -> dict[str, str]:
    """A status frame's headers as nats-py gives them: ``NATS/1.0 408 Request Timeout``
    and ``Key: value`` lines -> ``{"Status": "408", "Description": "Request Timeout",
    ...}``."""
    first, *lines = raw.decode(errors="replace").split("\r\n")
    out: dict[str, str] = {}
    code, _, description = first[len("NATS/1.0"):].strip().partition(" ")
    if code.isdigit():
        out[STATUS] = code
        if description:
            out["Description"] = description
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


class StreamFeed:
    def __init__(self, nc: NATS, stream: str, subject: str | None, start_seq: int,
                 cb: Callable[[Msg], Awaitable[None]], *, batch: int = 1000,
                 last_per_subject: bool = False, expires: float = 5.0) -> None:
        """``subject``: the consumer's filter; None for the whole stream, which is what to
        pass when a filter would cover the stream anyway (``BacklogReader``: nats-server
        spends far more per message through a wildcard filter)."""
        self.nc = nc
        self.js = nc.jetstream()
        self.stream = stream
        self.subject = subject
        self.cb = cb
        self.batch = batch
        self.expires = expires
        self.last_seq = max(0, start_seq - 1)
        self._last_per_subject = last_per_subject
        self._consumer: str | None = None
        self._sub: Any = None
        self._outstanding = 0
        self._last_activity = time.monotonic()
        self._watchdog: asyncio.Task[None] | None = None
        self._recreating = False
        self._stopped = False
        self._generation = 0
        self._queue: deque[tuple[int, Msg]] = deque()
        self._queued = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self.caught_up = asyncio.Event()
        """Set once the messages that existed when the feed started are delivered."""

    async def start(self) -> None:
        self._pump = asyncio.create_task(self._deliver(), name=f"feed-{self.stream}-deliver")
        await self._create()
        self._watchdog = asyncio.create_task(self._watch(), name=f"feed-{self.stream}")

    async def stop(self) -> None:
        self._stopped = True
        for task in (self._watchdog, self._pump):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        await self._drop_consumer(wait=False)

    async def unsubscribe(self) -> None:
        """Alias so a feed can stand where a subscription stood."""
        await self.stop()

    def _config(self) -> ConsumerConfig:
        # Named in the API subject (``CONSUMER.CREATE.<stream>.<name>.<filter>``), never in
        # the body: operator credentials may create only consumers named that way.
        common: dict[str, Any] = {
            "name": f"herd-feed-{uuid.uuid4().hex}",
            "ack_policy": AckPolicy.NONE, "filter_subject": self.subject,
            "inactive_threshold": 120.0, "mem_storage": True, "num_replicas": 1,
            "max_waiting": 16,
        }
        if self._last_per_subject and self.last_seq == 0:
            return ConsumerConfig(deliver_policy=DeliverPolicy.LAST_PER_SUBJECT, **common)
        if self.last_seq == 0:
            return ConsumerConfig(deliver_policy=DeliverPolicy.ALL, **common)
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=self.last_seq + 1, **common)

    async def _create(self) -> None:
        info = await self.js.add_consumer(self.stream, self._config())
        self._consumer = info.name
        if not info.num_pending:
            self.caught_up.set()
        self._outstanding = 0
        self._generation += 1
        generation = self._generation

        async def on_msg(msg: Msg) -> None:
            self._enqueue(generation, msg)

        self._sub = await self.nc.subscribe(self.nc.new_inbox(), cb=on_msg,
                                            pending_msgs_limit=4 * self.batch + 100)
        if nats_private.enabled():
            sid_routes(self.nc)[nats_private.sid_of(self._sub)] = self._route(generation)
        self._last_activity = time.monotonic()
        await self._request()

    def _route(self, generation: int) -> Route:
        nc = self.nc

        def route(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
            # a delivery's headers are not read (None); a status's are (it has no reply)
            self._enqueue(generation, Msg(nc, subject.decode(), reply.decode(), data,
                                          status_headers(headers) if headers else None))

        return route

    def _enqueue(self, generation: int, msg: Msg) -> None:
        self._queue.append((generation, msg))
        self._queued.set()

    async def _deliver(self) -> None:
        """The callback, message by message in arrival order; an error of the callback is
        logged and the next message delivered (as nats-py's subscription does)."""
        queue = self._queue
        while True:
            if not queue:
                self._queued.clear()
                await self._queued.wait()
                continue
            generation, msg = queue.popleft()
            try:
                await self._on_msg(msg, generation)
            except Exception:  # noqa: BLE001 - one bad message does not stop the feed
                log.exception("feed on %s: callback failed on %s", self.stream, msg.subject)

    async def _drop_consumer(self, wait: bool = True) -> None:
        """Unsubscribe and delete the consumer. ``wait=False`` (a stop): the delete is
        sent without waiting for JetStream's answer: on a cluster electing a new leader
        that answer took the API's 5 s timeout per feed, past a process's 2 s to stop
        (and the consumer expires by itself: ``inactive_threshold``)."""
        sub, self._sub = self._sub, None
        consumer, self._consumer = self._consumer, None
        if sub is not None:
            if nats_private.enabled():
                sid_routes(self.nc).pop(nats_private.sid_of(sub), None)
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - connection may be gone
                pass
        if consumer is not None and self.nc.is_connected:
            try:
                if wait:
                    await self.js.delete_consumer(self.stream, consumer)
                else:
                    await self.nc.publish(f"$JS.API.CONSUMER.DELETE.{self.stream}.{consumer}",
                                          b"")
            except Exception:  # noqa: BLE001 - it expires by itself (inactive_threshold)
                pass

    async def _request(self) -> None:
        if self._sub is None or self._consumer is None:
            return
        body = json.dumps({"batch": self.batch, "expires": int(self.expires * 1e9)})
        self._outstanding += self.batch
        try:
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self._consumer}",
                                  body.encode(), reply=self._sub.subject)
        except Exception as err:  # noqa: BLE001 - disconnected: the watchdog recreates
            self._outstanding -= self.batch
            log.debug("pull request for %s failed: %s", self.stream, err)

    async def _on_msg(self, msg: Msg, generation: int) -> None:
        if generation != self._generation:
            return  # a late message of a consumer we already replaced
        self._last_activity = time.monotonic()
        headers = msg.headers
        if headers and STATUS in headers and not msg.reply:
            await self._on_status(headers)
            return
        self._outstanding -= 1
        seq, pending = ack_position(msg)
        if seq > self.last_seq:
            self.last_seq = seq
            await self.cb(msg)
        if pending == 0:
            self.caught_up.set()
        if self._outstanding <= self.batch:
            await self._request()

    async def _on_status(self, headers: dict[str, str]) -> None:
        status = headers.get(STATUS, "")
        if status in ("404", "408"):
            # A request expired: that many of its messages will never come.
            self._outstanding -= int(headers.get(PENDING_MESSAGES, self.batch))
            self._outstanding = max(0, self._outstanding)
            if self._outstanding <= self.batch:
                await self._request()
        elif status == "100":
            pass
        else:
            # 409 consumer deleted / leadership change, 503 no responders: start over.
            log.info("feed on %s: status %s %s; resuming at %d", self.stream, status,
                     headers.get("Description", ""), self.last_seq + 1)
            asyncio.create_task(self._recreate())

    async def _recreate(self) -> None:
        if self._recreating or self._stopped:
            return
        self._recreating = True
        try:
            await self._drop_consumer()
            while not self._stopped:
                try:
                    await self._create()
                    return
                except Exception as err:  # noqa: BLE001 - server not back yet
                    log.debug("cannot recreate consumer on %s: %s", self.stream, err)
                    await asyncio.sleep(1.0)
        finally:
            self._recreating = False

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - self._last_activity > self.expires + 5.0:
                log.info("feed on %s idle; resuming at %d", self.stream, self.last_seq + 1)
                self._last_activity = time.monotonic()
                await self._recreate()
