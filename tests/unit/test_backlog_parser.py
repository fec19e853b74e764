"""The backlog reader's parser: a byte stream cut anywhere gives each routed frame to its
route and every other frame (other sids, PING, +OK) to nats-py, in order, once."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from herdbook.events.backlog_reader import _routes


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
        _routes(client)[7] = route  # type: ignore[arg-type]
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
