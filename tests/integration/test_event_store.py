"""The JetStream event store against a real nats-server."""

from __future__ import annotations

import asyncio

import pytest

from herdbook.events.node import NodeApproved, NodeRegistered, NodeRejected
from herdbook.events.store import ConflictError, EventStore


async def test_two_concurrent_writers_on_one_node_exactly_one_wins(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    version = await store.append(NodeRegistered(node_id="gpu-1"))
    # both decided from the same version
    results = await asyncio.gather(
        store.append(NodeApproved(node_id="gpu-1", actor="alice"), expected_version=version),
        store.append(NodeRejected(node_id="gpu-1", actor="bob"), expected_version=version),
        return_exceptions=True,
    )
    wins = [r for r in results if isinstance(r, int)]
    conflicts = [r for r in results if isinstance(r, ConflictError)]
    assert len(wins) == 1 and len(conflicts) == 1, results
    events = await store.load("node", "gpu-1")
    assert [type(e).__name__ for _, e in events][0] == "NodeRegistered"
    assert len(events) == 2


async def test_expected_version_covers_every_subject_of_the_aggregate(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    first = await store.append(NodeRegistered(node_id="gpu-2"))
    await store.append(NodeApproved(node_id="gpu-2"), expected_version=first)
    # a different subject (rejected) of the same node, decided from the stale version
    with pytest.raises(ConflictError):
        await store.append(NodeRejected(node_id="gpu-2"), expected_version=first)
    # other aggregates are unaffected by this node's version
    assert await store.append(NodeRegistered(node_id="gpu-3"), expected_version=0) > first


async def test_expected_version_zero_means_no_events_yet(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    await store.append(NodeRegistered(node_id="gpu-4"), expected_version=0)
    with pytest.raises(ConflictError):
        await store.append(NodeRegistered(node_id="gpu-4"), expected_version=0)


async def test_a_resent_event_is_deduplicated(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    event = NodeRegistered(node_id="gpu-5")
    first = await store.append(event)
    again = await store.append(event)
    assert again == first
    assert len(await store.load("node", "gpu-5")) == 1


async def test_a_resend_with_expectation_after_a_landed_write_is_not_a_conflict(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    v = await store.append(NodeRegistered(node_id="gpu-6"))
    event = NodeApproved(node_id="gpu-6")
    landed = await store.append(event, expected_version=v)
    # what a retry after a lost ack finds: the server checks the expectation first
    assert await store._landed_seq("herd.node.gpu-6.>", event.event_id) == landed


async def test_load_and_subscribe_from_a_sequence(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    seqs = [await store.append(NodeRegistered(node_id=f"n{i}")) for i in range(5)]
    assert await store.load("node", "nobody") == []
    got: list[int] = []
    done = asyncio.Event()

    async def on_msg(msg) -> None:  # type: ignore[no-untyped-def]
        got.append(msg.metadata.sequence.stream)
        if len(got) == 3:
            done.set()

    sub = await store.subscribe(seqs[2], on_msg)
    await asyncio.wait_for(done.wait(), 5)
    await sub.unsubscribe()
    assert got == seqs[2:]
