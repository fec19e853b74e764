"""Stream limits a real fleet needs."""

from __future__ import annotations

from typing import Any

from herdbook.events.subjects import EVENTS_STREAM


async def test_more_than_a_thousand_agents_can_follow_their_allocations(nc: Any) -> None:
    """nats-server 2.15 caps a stream at 1000 consumers unless the stream sets a limit;
    every agent holds one consumer on HERD_EVENTS."""
    js = nc.jetstream()
    info = await js.stream_info(EVENTS_STREAM)
    assert info.config.max_consumers >= 100_000

    async def ignore(msg: Any) -> None:
        pass

    subs = [await js.subscribe(f"herd.alloc.n{i}.>", stream=EVENTS_STREAM, cb=ignore,
                               ordered_consumer=True) for i in range(1050)]
    assert (await js.stream_info(EVENTS_STREAM)).state.consumer_count >= 1050
    for sub in subs:
        await sub.unsubscribe()
