"""The backlog reader's parser: a byte stream cut anywhere gives each routed frame to its
route and every other frame (other sids, PING, +OK) to nats-py, in order, once."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from herdbook.events.narrow_parser import sid_routes


class _FakeClient:
    def __init__(self) -> None:
        self._ps = Parser(self)
        self.seen: list[tuple[Any, ...]] = []

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                           headers: bytes | None) -> None:
        self.seen.append(("nats", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.seen.append(("ping",))


HDR = b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n"
STREAM = (
    b"HMSG herd.node.a 7 $JS.ACK.S.c.1.1.1.0.5 " + str(len(HDR)).encode() + b" "
    + str(len(HDR) + 5).encode() + b"\r\n" + HDR + b"hello\r\n"
    + b"MSG other 3 2\r\nhi\r\n"
    + b"PING\r\n"
    + b"MSG herd.node.b 7 $JS.ACK.S.c.1.2.2.0.4 3\r\nabc\r\n"
    + b"HMSG _INBOX.x 7 " + b"16 16\r\nNATS/1.0 408\r\n\r\n\r\n"
    + b"+OK\r\n"
    + b"MSG herd.node.c 7 3\r\nxyz\r\n"
)


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(STREAM)), max_size=8))
def test_any_split_routes_each_frame_once_in_order(cuts: list[int]) -> None:
    client = _FakeClient()
    routed: list[tuple[Any, ...]] = []

    async def route(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        routed.append((subject, reply, data, headers))

    async def feed() -> None:
        sid_routes(client)[7] = route  # type: ignore[arg-type]
        bounds = [0, *sorted(cuts), len(STREAM)]
        for start, end in zip(bounds, bounds[1:], strict=False):
            await client._ps.parse(STREAM[start:end])

    asyncio.run(feed())
    assert routed == [
        (b"herd.node.a", b"$JS.ACK.S.c.1.1.1.0.5", b"hello", None),   # headers: a status's only
        (b"herd.node.b", b"$JS.ACK.S.c.1.2.2.0.4", b"abc", None),
        (b"_INBOX.x", b"", b"", b"NATS/1.0 408\r\n\r\n"),
        (b"herd.node.c", b"", b"xyz", None),
    ]
    assert client.seen == [("nats", 3, b"other", b"", b"hi", None), ("ping",)]
    assert all(type(part) is bytes for frame in routed for part in frame[:3])


def _js(subject: bytes, sid: int, seq: int, data: bytes, *, headers: bool = True,
        reply: bytes | None = None) -> bytes:
    """One JetStream delivery as nats-server writes it (pending = 100 - seq)."""
    reply = reply or b"$JS.ACK.HERD_EVENTS.c.%d.%d.%d.1700000000.%d" % (seq, seq, seq, 100 - seq)
    if not headers:
        return b"MSG %s %d %s %d\r\n%s\r\n" % (subject, sid, reply, len(data), data)
    return (b"HMSG %s %d %s %d %d\r\n" % (subject, sid, reply, len(HDR), len(HDR) + len(data))
            + HDR + data + b"\r\n")


def _status(sid: int, code: bytes, reason: bytes) -> bytes:
    head = b"NATS/1.0 " + code + b" " + reason + b"\r\n\r\n"
    return b"HMSG _INBOX.x %d %d %d\r\n%s\r\n" % (sid, len(head), len(head), head)


BATCHED = (
    _js(b"herd.node.a", 7, 1, b'{"a":1}')
    + _js(b"herd.node.b", 7, 2, b"MSG x 7 y 1\r\n", headers=False)   # a payload that looks like a frame
    + _js(b"herd.node.c", 7, 3, b"")
    + _status(7, b"100", b"Idle Heartbeat")
    + _js(b"herd.node.d", 7, 4, b"d")
    + _js(b"herd.other", 3, 9, b"not ours")                         # another sid: nats-py's
    + _js(b"herd.node.e", 7, 5, b"e")
    + b"PING\r\n"
    + _js(b"herd.node.f", 7, 6, b"f", reply=b"$JS.ACK.dom.acc.S.c.1.6.6.0.94.x")   # another layout
    + _js(b"herd.node.g", 7, 7, b"g")
    + _js(b"herd.node.h", 7, 8, b"h", reply=b"$JS.ACK.HERD_EVENTS.old.1.8.8.0.92")  # an earlier consumer's
    + _js(b"herd.node.e", 7, 5, b"e again")                         # a new consumer starting over
    + _status(7, b"408", b"Request Timeout")
    + _status(7, b"409", b"Consumer Deleted")
    + _status(7, b"404", b"No Messages")
)


@settings(max_examples=300, deadline=None)
@given(cuts=st.lists(st.integers(0, len(BATCHED)), max_size=10))
def test_runs_of_deliveries_go_to_the_batch_the_rest_in_order(cuts: list[int]) -> None:
    from herdbook.events.narrow_parser import run_of, sid_batches

    client = _FakeClient()
    log: list[tuple[Any, ...]] = []

    def batch(frames: list[tuple[bytes, int, bytes]], pending: int) -> None:
        assert frames and pending == 100 - frames[-1][1]
        assert [seq for _, seq, _ in frames] == sorted({seq for _, seq, _ in frames})
        log.extend(("batch", subject, seq, data) for subject, seq, data in frames)

    def route(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        log.append(("frame", subject, reply, data, headers[9:12] if headers else None))

    async def feed() -> None:
        sid_routes(client)[7] = route  # type: ignore[arg-type]
        sid_batches(client)[7] = run_of(7, "HERD_EVENTS", "c", batch)  # type: ignore[arg-type]
        bounds = [0, *sorted(cuts), len(BATCHED)]
        for start, end in zip(bounds, bounds[1:], strict=False):
            await client._ps.parse(BATCHED[start:end])

    asyncio.run(feed())
    assert log == [
        ("batch", b"herd.node.a", 1, b'{"a":1}'),
        ("batch", b"herd.node.b", 2, b"MSG x 7 y 1\r\n"),
        ("batch", b"herd.node.c", 3, b""),
        ("frame", b"_INBOX.x", b"", b"", b"100"),
        ("batch", b"herd.node.d", 4, b"d"),
        ("batch", b"herd.node.e", 5, b"e"),
        ("frame", b"herd.node.f", b"$JS.ACK.dom.acc.S.c.1.6.6.0.94.x", b"f", None),
        ("batch", b"herd.node.g", 7, b"g"),
        ("frame", b"herd.node.h", b"$JS.ACK.HERD_EVENTS.old.1.8.8.0.92", b"h", None),
        ("batch", b"herd.node.e", 5, b"e again"),
        ("frame", b"_INBOX.x", b"", b"", b"408"),
        ("frame", b"_INBOX.x", b"", b"", b"409"),
        ("frame", b"_INBOX.x", b"", b"", b"404"),
    ]
    assert client.seen == [("nats", 3, b"herd.other",
                            b"$JS.ACK.HERD_EVENTS.c.9.9.9.1700000000.91", b"not ours", HDR),
                           ("ping",)]
    assert all(type(part) is bytes for entry in log for part in entry[1:2])
