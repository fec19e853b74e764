"""Catching up on a stream's backlog at the speed of the fold, not of the client.

``BacklogReader`` reads what a stream held when a reader started (the projector's
rebuild or restart), in the process that folds it. It is a pull consumer minus nats-py's
per-message work (a regex per frame, a ``Msg``, header parsing, a queue and a task hop):
on a 200k-event backlog here it read 390-455k msg/s
(benchmarks/view_rebuild.py, docs/performance.md). ``StreamFeed`` (live) routes its own
inbox through the same narrow parser (``sid_routes``), one frame at a time.

How, narrowly: the client's connection, its authentication, TLS, pings and reconnects
stay nats-py's. The reader subscribes an inbox (so nats-py resubscribes it after a
reconnect, under the same sid) and registers that sid with the client's protocol parser,
which is given one fast path once (``_NarrowParser``): a whole MSG/HMSG frame for a
registered sid goes to the reader as raw ``(subject, reply, data, headers)``; other
messages go where nats-py's parser sends them (``_process_msg``), other lines through
that parser itself, and with no reader registered it runs alone. This leans on private
parts of nats-py 2.16 (``Client._ps``, ``Client._process_msg``, ``Subscription._id``), all
reached through ``nats_private``, which checks them first: where they are not as
expected (or ``HERD_NATS_PRIVATE=off``) the reader takes its deliveries as ``Msg``
through a subscription callback instead (slower, the same messages);
tests/unit/test_backlog_parser.py and tests/integration/test_backlog_reader.py pin both.
The reader pulls from an ephemeral consumer at most ``2 * batch`` ahead of the callback.

Most frames never reach a per-frame route: a run of whole deliveries of the reader's
consumer to its inbox (``HMSG <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.
<sseq>.<dseq>.<ts>.<pending> <hdr> <size>``, registered in ``batches`` as a ``Run`` once
the consumer exists) is cut by a pattern compiled for that sid, stream and consumer
(``_cut``: the stream sequence and pending count come from the reply subject, headers
are never parsed) and handed over as one list of ``(subject, sequence, data)``: no
Python call, no ``split`` and no ``time.monotonic()`` per frame. Anything else (a
status, another sid, an earlier consumer's delivery, another reply layout, a sequence
that goes back) ends the run and takes the per-frame path above, in order.

Guarantees, as ``StreamFeed``'s: sequences strictly increasing, each at most once;
nothing heard for ``expires + 2s`` (server restarted, consumer lost) or a 409 status:
a new consumer resumes at the last delivered sequence + 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, cast

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from herdbook.events import nats_private
from herdbook.events.nats_private import AWAITING_CONTROL_LINE, ParserBase

_c_cut: Callable[[bytearray, int, bytes], tuple[Frames, int, int]] | None
try:   # optional: built where the package was installed with a C compiler (setup.py)
    from herdbook.events._frames import cut as _c_cut
except ImportError:   # pragma: no cover - depends on the install
    _c_cut = None

log = logging.getLogger(__name__)

OnMsg = Callable[[str, bytes, int], Awaitable[None] | None]
"""(subject, data, stream sequence) -> None, or an awaitable the reader awaits first."""
Route = Callable[[bytes, bytes, bytes, bytes | None], Awaitable[None] | None]
"""(subject, reply, data, headers) -> None, or an awaitable the parser awaits before the
next frame: a plain call per frame, no coroutine, unless there is something to wait for."""


Frames = list[tuple[bytes, int, bytes | bytearray]]
"""A run of stored messages as ``(subject, stream sequence, data)``, in stream order."""
Batch = Callable[[Frames, int], Awaitable[None] | None]
"""(frames, the last frame's pending count) -> None, or an awaitable the parser awaits
before the next frame."""
OnBatch = Callable[[Frames], Awaitable[None] | None]
"""What a reader hands its consumer instead of one ``OnMsg`` call per message."""

class Run(NamedTuple):
    """A reader's runs of deliveries (``_cut``): the control lines of its consumer's
    deliveries, with and without headers, what follows the subject in both (``head``,
    for the compiled cut), and where a run goes."""

    with_headers: Callable[[bytearray, int], re.Match[bytes] | None]
    without_headers: Callable[[bytearray, int], re.Match[bytes] | None]
    head: bytes
    batch: Batch


def run_of(sid: int, stream: str, consumer: str, batch: Batch) -> Run:
    """What ``_cut`` matches for the deliveries of ``consumer`` of ``stream`` to ``sid``:
    ``HMSG <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.
    <pending> <header size> <size>`` (and the ``MSG`` form): subject, stream sequence,
    pending, header size (empty for MSG), size. Anything else (statuses have no reply,
    another consumer, the reply layout with a domain) does not match. Spelling the sid,
    stream and consumer out literally is what makes it cheap: a pattern with character
    classes for them took ~1.0 µs a line, this one ~0.6."""
    head = (rb" %d \$JS\.ACK\.%s\.%s\.\d+\.(\d+)\.\d+\.\d+\.(\d+) "
            % (sid, re.escape(stream.encode()), re.escape(consumer.encode())))
    return Run(re.compile(rb"HMSG ([^ \r\n]+)" + head + rb"(\d+) (\d+)\r\n").match,
               re.compile(rb"MSG ([^ \r\n]+)" + head + rb"()(\d+)\r\n").match,
               b" %d $JS.ACK.%s.%s." % (sid, stream.encode(), consumer.encode()), batch)


def _cut(buf: bytearray, pos: int, run: Run) -> tuple[Frames, int, int]:
    """The run of whole deliveries at ``pos`` matched by ``run``, sequences increasing:
    (frames, the last one's pending, where the run ends). In C where the package was
    built with it (``_frames.cut``: ~0.15 µs a frame against ~1.15 for ``_cut_py``, the
    same frames, tests/unit/test_frames_c.py); it also ends a run at a number of more
    than 19 digits, which then goes frame by frame."""
    if _c_cut is not None:
        return _c_cut(buf, pos, run.head)
    return _cut_py(buf, pos, run)


def _cut_py(buf: bytearray, pos: int, run: Run) -> tuple[Frames, int, int]:
    """``_cut`` in Python. A frame's data is a copy of its bytes out of the buffer (a
    ``bytearray``: one copy, not two)."""
    with_headers, without_headers = run.with_headers, run.without_headers
    frames: Frames = []
    append = frames.append
    pending = b"0"
    last = 0
    size = len(buf)
    while True:
        found = with_headers(buf, pos) or without_headers(buf, pos)
        if found is None:
            break
        subject, seq_text, more, header_size, data_size = found.groups()
        start = found.end()
        end = start + int(data_size)
        seq = int(seq_text)
        if end + 2 > size or seq <= last:
            break   # not whole yet, or a new consumer starting over: the run ends here
        # A stored message's headers are not read.
        append((subject, seq, buf[start + int(header_size):end] if header_size
                else buf[start:end]))
        last, pending, pos = seq, more, end + 2
    return frames, int(pending), pos


class _NarrowParser(ParserBase):  # type: ignore[misc]
    """nats-py's parser with one fast path: a complete MSG/HMSG frame is cut out with
    ``find`` and ``split`` (no regex) and, for a routed sid, handed to its route as raw
    bytes; any other frame goes where nats-py sends it (``_process_msg``), and any other
    line (PING, INFO, +OK, -ERR) through nats-py's own ``parse``, one line at a time.
    With no route registered, nats-py's parser runs as it is."""

    routes: dict[int, Route]
    batches: dict[int, Run]
    """By sid: the runs of deliveries its reader takes (``_cut``)."""

    async def parse(self, data: bytes = b"") -> None:
        if not self.routes or self.state != AWAITING_CONTROL_LINE:
            await super().parse(data)
            return
        buf = self.buf
        buf.extend(data)
        routes = self.routes
        batches = self.batches
        pos = 0
        try:
            while True:
                if batches:
                    for run in batches.values():   # one, or a few readers at once
                        frames, pending, after = _cut(buf, pos, run)
                        if frames:
                            break
                    if frames:
                        pos = after
                        more = run.batch(frames, pending)
                        if more is not None:
                            await more
                        if buf is not self.buf:
                            return   # reset by a reconnect meanwhile: the rest is stale
                        continue
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return
                if buf.startswith(b"HMSG ", pos):   # subject sid [reply] header-size size
                    args = buf[pos + 5:eol].split()
                    header_size, size, replied = int(args[-2]), int(args[-1]), len(args) == 5
                elif buf.startswith(b"MSG ", pos):  # subject sid [reply] size
                    args = buf[pos + 4:eol].split()
                    header_size, size, replied = 0, int(args[-1]), len(args) == 4
                else:
                    if not await self._one_line(buf, pos, eol + 2):
                        return
                    pos = eol + 2
                    continue
                start = eol + 2
                if len(buf) < start + size + 2:
                    return   # not yet whole: wait for the rest
                body = bytes(buf[start + header_size:start + size])
                sid, reply = int(args[1]), bytes(args[2]) if replied else b""
                route = routes.get(sid)
                if route is not None:
                    # A stored message's headers are not read: only a status's (no reply).
                    headers = None if replied or not header_size else bytes(
                        buf[start:start + header_size])
                    pos = start + size + 2
                    more = route(bytes(args[0]), reply, body, headers)
                    if more is not None:
                        await more
                else:
                    headers = bytes(buf[start:start + header_size]) if header_size else None
                    pos = start + size + 2
                    await nats_private.process_msg(self.nc)(sid, bytes(args[0]), reply, body,
                                                            headers)
                if buf is not self.buf:
                    return   # reset by a reconnect meanwhile: the rest is stale
        finally:
            if pos and buf is self.buf:
                del buf[:pos]

    async def _one_line(self, buf: bytearray, start: int, end: int) -> bool:
        """nats-py's parse of one control line; False if a reset replaced the buffer."""
        line = self.buf = bytearray(buf[start:end])
        await super().parse()
        if self.buf is not line:
            return False
        self.buf = buf
        return True


def sid_routes(nc: NATS) -> dict[int, Route]:
    """The sid -> route table (a backlog reader's inbox, a live feed's), on a parser
    installed on the client once (see the module's docstring); the parser's state (a
    half-read frame) is kept."""
    return _parser(nc).routes


def _batches(nc: NATS) -> dict[int, Run]:
    """The sid -> run table (``_cut``), beside ``sid_routes``; a sid here needs a route
    there too, for what is not a run of deliveries (statuses, another consumer's)."""
    return _parser(nc).batches


def _parser(nc: NATS) -> _NarrowParser:
    parser = cast(_NarrowParser, nats_private.install_parser(nc, _NarrowParser))
    if getattr(parser, "routes", None) is None:
        parser.routes = {}
        parser.batches = {}
    return parser


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
            routes, batches = sid_routes(self.nc), _batches(self.nc)
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
            _batches(self.nc)[sid] = run_of(sid, self.stream, info.name, self._on_batch)
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
