"""StreamFeed: every message once, in order, with backpressure, across a server restart."""

from __future__ import annotations

import asyncio

import nats

from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.feed import StreamFeed
from herdbook.events.node import NodeRegistered
from herdbook.events.store import EventStore, subject_of
from herdbook.events.subjects import EVENTS_STREAM
from tests.conftest import settle


async def publish(nc, count: int, prefix: str = "n") -> None:  # type: ignore[no-untyped-def]
    for i in range(count):
        event = NodeRegistered(node_id=f"{prefix}{i}")
        await nc.publish(subject_of(event), encode(event))
    await nc.flush()




async def test_a_slow_callback_gets_every_message_once_in_order(nc) -> None:  # type: ignore[no-untyped-def]
    await publish(nc, 30_000)
    last = await settle(nc)
    seen: list[int] = []
    done = asyncio.Event()

    async def slow(msg) -> None:  # type: ignore[no-untyped-def]
        seq = msg.metadata.sequence.stream
        seen.append(seq)
        if seq % 1000 == 0:
            await asyncio.sleep(0.02)   # a SQLite commit
        if seq == last:
            done.set()

    feed = StreamFeed(nc, EVENTS_STREAM, "herd.>", 1, slow, batch=500)
    await feed.start()
    await asyncio.wait_for(done.wait(), 60)
    await feed.stop()
    assert seen == list(range(1, last + 1))


async def test_the_feed_resumes_after_a_server_restart(nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    nc = await nats.connect(nats_server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    await ensure_streams(nc, 1, 3600.0)
    store = EventStore(nc)
    seen: list[int] = []

    async def cb(msg) -> None:  # type: ignore[no-untyped-def]
        seen.append(msg.metadata.sequence.stream)

    feed = StreamFeed(nc, EVENTS_STREAM, "herd.>", 1, cb, expires=1.0)
    await feed.start()
    try:
        await store.append(NodeRegistered(node_id="before"))
        nats_server.stop()
        await asyncio.sleep(0.5)
        nats_server.start()
        for _ in range(100):
            try:
                await store.append(NodeRegistered(node_id="after"))
                break
            except Exception:  # noqa: BLE001 - reconnecting
                await asyncio.sleep(0.2)
        for _ in range(150):
            if len(seen) >= 2:
                break
            await asyncio.sleep(0.1)
        assert seen == [1, 2]
    finally:
        await feed.stop()
        await nc.close()
