"""The live feed's deliveries skip nats-py's per-message work (routed raw by sid) and
keep every guarantee: each message once, in order, statuses heard, a callback free to
make NATS requests of its own."""

from __future__ import annotations

import asyncio

from herdbook.events.feed import StreamFeed
from herdbook.events.narrow_parser import sid_routes
from herdbook.events.node import NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.subjects import EVENTS_STREAM


async def test_deliveries_come_routed_with_their_headers_unread(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    for i in range(5):
        await store.append(NodeRegistered(node_id=f"n{i}"))   # each with a Nats-Msg-Id
    seen: list[tuple[int, object]] = []
    feed = StreamFeed(nc, EVENTS_STREAM, "herd.>", 1,
                      lambda msg: _seen(seen, msg), batch=2)
    await feed.start()
    try:
        sid = feed._sub._id
        assert sid in sid_routes(nc)
        for _ in range(100):
            if len(seen) == 5:
                break
            await asyncio.sleep(0.02)
        assert [s for s, _ in seen] == [1, 2, 3, 4, 5]
        assert {h for _, h in seen} == {None}          # nats-py parsed none of them
    finally:
        await feed.stop()
    assert sid not in sid_routes(nc)


async def _seen(seen: list[tuple[int, object]], msg) -> None:  # type: ignore[no-untyped-def]
    seen.append((msg.metadata.sequence.stream, msg.headers))


async def test_expired_requests_are_heard_and_a_callback_may_append(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    seen: list[int] = []
    echoed = asyncio.Event()

    async def cb(msg) -> None:  # type: ignore[no-untyped-def]
        seen.append(msg.metadata.sequence.stream)
        if msg.subject.startswith("herd.node.ping"):
            # a NATS request from inside the callback: the read loop must not wait on us
            await store.append(NodeRegistered(node_id=f"echo{len(seen)}"))
        elif msg.subject.startswith("herd.node.echo"):
            echoed.set()

    feed = StreamFeed(nc, EVENTS_STREAM, "herd.>", 1, cb, batch=3, expires=0.3)
    await feed.start()
    try:
        await asyncio.sleep(1.2)   # requests expire (408) while nothing is stored
        await store.append(NodeRegistered(node_id="ping"))
        # well before the watchdog (expires + 5 s) would start a new consumer
        await asyncio.wait_for(echoed.wait(), 3.0)
        assert seen == [1, 2]
    finally:
        await feed.stop()
