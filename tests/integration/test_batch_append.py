"""Atomic batch appends (``EventStore.append_batch``) against a real nats-server, and
the scheduler sending a small plan one ack per event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from herdbook.control.nats_parts import ensure_streams
from herdbook.events.alloc import AllocPlaced, AllocStopRequested
from herdbook.events.batch import BATCH_ID
from herdbook.events.evals import EvalStatus
from herdbook.events.node import NodeApproved, NodeRegistered
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.reactors import plan_apply
from tests.integration.test_scheduler import Harness


def placed(node_id: str, *alloc_ids: str) -> list[AllocPlaced]:
    return [AllocPlaced(node_id=node_id, alloc_id=a, job_id="j", eval_id="e", index=i,
                        command=["true"]) for i, a in enumerate(alloc_ids)]


async def stored(store: EventStore, node_id: str) -> list[str]:
    return [e.alloc_id for _, e in await store.load("alloc", node_id)]  # type: ignore[attr-defined]


async def batch_ids(nc: Any, first: int, last: int) -> list[str | None]:
    js = nc.jetstream()
    return [((await js.get_msg(EVENTS_STREAM, seq)).headers or {}).get(BATCH_ID)
            for seq in range(first, last + 1)]


async def test_a_batch_lands_whole_in_order_and_returns_the_last_sequence(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    seq = await store.append_batch(placed("n1", "a1", "a2", "a3"), 0)
    events = await store.load("alloc", "n1")
    assert [s for s, _ in events] == [seq - 2, seq - 1, seq]
    assert await stored(store, "n1") == ["a1", "a2", "a3"]
    ids = await batch_ids(nc, seq - 2, seq)
    assert ids[0] is not None and ids == [ids[0]] * 3   # one batch, not three appends
    assert await store.append_batch(placed("n1", "a4"), seq) == seq + 1


async def test_a_stale_batch_stores_nothing_and_fails_only_its_own_node(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    first = await store.append_batch(placed("n1", "a1"), 0)
    await store.append_batch(placed("n1", "a2"), first)
    results = await asyncio.gather(
        store.append_batch(placed("n1", "stale-1", "stale-2"), first),   # decided before a2
        store.append_batch(placed("n2", "b1", "b2"), 0),
        return_exceptions=True)
    assert isinstance(results[0], ConflictError), results
    assert isinstance(results[1], int), results
    assert await stored(store, "n1") == ["a1", "a2"]
    assert await stored(store, "n2") == ["b1", "b2"]


async def test_two_batches_racing_on_one_node_exactly_one_lands_whole(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    version = await store.append_batch(placed("n1", "a0"), 0)
    results = await asyncio.gather(
        store.append_batch(placed("n1", "x1", "x2", "x3"), version),
        store.append_batch(placed("n1", "y1", "y2", "y3"), version),
        return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["ConflictError", "int"], results
    assert await stored(store, "n1") in (["a0", "x1", "x2", "x3"], ["a0", "y1", "y2", "y3"])


async def test_a_resent_batch_is_deduplicated_and_returns_its_sequence(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    events = placed("n1", "a1", "a2")
    seq = await store.append_batch(events, 0)
    # a resend (the first ack was lost), whether or not something came after it
    assert await store.append_batch(events, 0) == seq
    await store.append_batch([AllocStopRequested(node_id="n1", alloc_id="a1")], seq)
    assert await store.append_batch(events, 0) == seq
    assert await stored(store, "n1") == ["a1", "a2", "a1"]
    # a single append of a batched event is deduplicated too
    assert await store.append(events[0]) == seq - 1


async def test_chained_node_events_go_one_by_one_with_their_hash_chain(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    seq = await store.append_batch([NodeRegistered(node_id="gpu-1"),
                                    NodeApproved(node_id="gpu-1")], 0)
    events = await store.load("node", "gpu-1")
    assert [s for s, _ in events][-1] == seq
    assert events[1][1].prev_hash is not None   # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="one aggregate"):
        await store.append_batch(placed("n1", "a1") + placed("n2", "b1"), 0)


async def test_a_stream_without_atomic_batches_gets_one_append_per_event(
        nc_without_atomic) -> None:  # type: ignore[no-untyped-def]
    nc = nc_without_atomic
    store = EventStore(nc)
    seq = await store.append_batch(placed("n1", "a1", "a2"), 0)
    assert not store.atomic
    assert await stored(store, "n1") == ["a1", "a2"]
    assert await batch_ids(nc, seq - 1, seq) == [None, None]
    with pytest.raises(ConflictError):
        await store.append_batch(placed("n1", "a3"), 0)


async def test_the_scheduler_sends_a_plan_below_atomic_min_one_ack_per_event(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    # a plan of ATOMIC_MIN events or more: tests/integration/test_placement_batches.py
    monkeypatch.setattr(plan_apply, "ATOMIC_MIN", 7)
    for node_id in ("n1", "n2"):
        await h.add_node(node_id, gpus=4)
    await h.start()
    await h.wait_status(await h.run_job(count=6), EvalStatus.COMPLETE)
    parts = {}
    for node_id in ("n1", "n2"):
        seqs = [s for s, _ in await h.store.load("alloc", node_id)]
        assert len(seqs) == len(h.allocs(node_id=node_id))
        parts[len(seqs)] = [(await batch_ids(h.nc, s, s))[0] for s in seqs]
    assert parts == {2: [None, None], 4: [None] * 4}     # below ATOMIC_MIN: one ack each


async def test_ensure_streams_keeps_atomic_batches_on(nc) -> None:  # type: ignore[no-untyped-def]
    await ensure_streams(nc, 1, 3600.0)
    info = await nc.jetstream().stream_info(EVENTS_STREAM)
    assert info.config.allow_atomic is True
