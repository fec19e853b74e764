"""The client's narrow parser: the read path of every stored message a reader of this
process takes (``backlog_reader.BacklogReader``, ``feed.StreamFeed``), as raw bytes.

The client's connection, its authentication, TLS, pings and reconnects stay nats-py's. A
reader subscribes an inbox (so nats-py resubscribes it after a reconnect, under the same
sid) and registers that sid here (``sid_routes``), on the client's protocol parser, which
is given one fast path once (``_NarrowParser``): a whole MSG/HMSG frame for a registered
sid goes to its route as raw ``(subject, reply, data, headers)``; other messages go where
nats-py's parser sends them (``_process_msg``), other lines through that parser itself,
and with no route registered it runs alone. This leans on private parts of nats-py 2.16
(``Client._ps``, ``Client._process_msg``, ``Subscription._id``), all reached through
``nats_private``, which checks them first; where they are not as expected (or
``HERD_NATS_PRIVATE=off``) no reader registers here.

Most frames never reach a per-frame route: a run of whole deliveries of a reader's
consumer to its inbox (``HMSG <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.
<sseq>.<dseq>.<ts>.<pending> <hdr> <size>``, registered in ``sid_batches`` as a ``Run``
once the consumer exists) is cut by a pattern compiled for that sid, stream and consumer
(``_cut``: the stream sequence and pending count come from the reply subject, headers
are never parsed) and handed over as one list of ``(subject, sequence, data)``: no
Python call, no ``split`` and no ``time.monotonic()`` per frame. Anything else (a
status, another sid, an earlier consumer's delivery, another reply layout, a sequence
that goes back) ends the run and takes the per-frame path above, in order.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import NamedTuple, cast

from nats.aio.client import Client as NATS

from herdbook.events import nats_private
from herdbook.events.nats_private import AWAITING_CONTROL_LINE, ParserBase

_c_cut: Callable[[bytearray, int, bytes], tuple[Frames, int, int]] | None
try:   # optional: built where the package was installed with a C compiler (setup.py)
    from herdbook.events._frames import cut as _c_cut
except ImportError:   # pragma: no cover - depends on the install
    _c_cut = None

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


def sid_batches(nc: NATS) -> dict[int, Run]:
    """The sid -> run table (``_cut``), beside ``sid_routes``; a sid here needs a route
    there too, for what is not a run of deliveries (statuses, another consumer's)."""
    return _parser(nc).batches


def _parser(nc: NATS) -> _NarrowParser:
    parser = cast(_NarrowParser, nats_private.install_parser(nc, _NarrowParser))
    if getattr(parser, "routes", None) is None:
        parser.routes = {}
        parser.batches = {}
    return parser
