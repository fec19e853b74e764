"""A plan's nodes in shared atomic batches (``EventStore.append_atomic``, the scheduler's
``apply_plan``) against a real nats-server: each node's part expects that node's version,
a stale node refuses its whole batch, resends are deduplicated, and a stream without
atomic batches gets one append per event."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from nats.js.api import Header

from herdbook.events.batch import BATCH_ID
from herdbook.events.evals import EvalStatus
from herdbook.events.store import EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, ConflictError, EventStore
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.catch_up_gc import CATCH_UP_GC_GEN0
from herdbook.reactors import plan_apply, scheduler
from tests.integration.test_batch_append import placed, stored
from tests.integration.test_scheduler import Harness

EXPECTED = Header.EXPECTED_LAST_SUBJECT_SEQUENCE.value


async def headers_of(nc: Any, node_id: str) -> list[dict[str, str]]:
    """The headers of every event of the node's allocations, in order."""
    js = nc.jetstream()
    seqs = [s for s, _ in await EventStore(nc).load("alloc", node_id)]
    return [dict((await js.get_msg(EVENTS_STREAM, s)).headers or {}) for s in seqs]


async def test_several_nodes_land_in_one_batch_each_expecting_its_own_version(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    v1 = await store.append_batch(placed("n1", "a0"), 0)
    seq = await store.append_atomic([(placed("n1", "a1", "a2"), v1),
                                     (placed("n2", "b1", "b2", "b3"), 0)])
    assert await stored(store, "n1") == ["a0", "a1", "a2"]
    assert await stored(store, "n2") == ["b1", "b2", "b3"]
    n1, n2 = (await headers_of(nc, "n1"))[1:], await headers_of(nc, "n2")
    assert len({h[BATCH_ID] for h in n1 + n2}) == 1                 # one batch, one ack
    assert [h.get(EXPECTED) for h in n1] == [str(v1), None]
    assert [h.get(EXPECTED) for h in n2] == ["0", None, None]
    assert n2[0][EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] == "herd.alloc.n2.>"
    assert all(h[Header.MSG_ID.value] for h in n1 + n2)
    assert seq == (await store.load("alloc", "n2"))[-1][0]          # the last event's


async def test_one_stale_node_refuses_the_whole_batch_and_no_other(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    v2 = await store.append_batch(placed("n2", "b0"), 0)
    await store.append_batch(placed("n2", "b1"), v2)
    with pytest.raises(ConflictError):
        await store.append_atomic([(placed("n1", "a1"), 0),
                                   (placed("n2", "stale"), v2),     # decided before b1
                                   (placed("n3", "c1"), 0)])
    assert await stored(store, "n1") == [] and await stored(store, "n3") == []
    assert await stored(store, "n2") == ["b0", "b1"]
    await store.append_atomic([(placed("n1", "a1"), 0), (placed("n3", "c1"), 0)])
    assert await stored(store, "n1") == ["a1"]


async def test_a_resent_batch_of_several_nodes_returns_its_sequence_once_stored(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    parts = [(placed("n1", "a1", "a2"), 0), (placed("n2", "b1"), 0)]
    seq = await store.append_atomic(parts)
    assert await store.append_atomic(parts) == seq                   # the ack was lost
    assert await stored(store, "n1") == ["a1", "a2"]
    assert await stored(store, "n2") == ["b1"]


async def test_a_resend_after_others_wrote_to_its_nodes_returns_the_first_sequence(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    parts = [(placed("n1", "a1"), 0), (placed("n2", "b1", "b2"), 0)]
    seq = await store.append_atomic(parts)
    await store.append_atomic([(placed("n1", "a9"), seq - 2), (placed("n2", "b9"), seq)])
    assert await store.append_atomic(parts) == seq                   # found, not stored again
    assert await stored(store, "n1") == ["a1", "a9"]
    assert await stored(store, "n2") == ["b1", "b2", "b9"]


async def test_two_parts_of_one_node_are_refused(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    with pytest.raises(ValueError, match="one part per aggregate"):
        await store.append_atomic([(placed("n1", "a1"), 0), (placed("n1", "a2"), 0)])
    with pytest.raises(ValueError, match="one aggregate"):
        await store.append_atomic([(placed("n1", "a1") + placed("n2", "b1"), 0)])


async def test_without_atomic_batches_each_part_goes_one_event_at_a_time(
        nc_without_atomic) -> None:  # type: ignore[no-untyped-def]
    nc = nc_without_atomic
    store = EventStore(nc)
    await store.append_atomic([(placed("n1", "a1", "a2"), 0), (placed("n2", "b1"), 0)])
    assert not store.atomic
    assert await stored(store, "n1") == ["a1", "a2"] and await stored(store, "n2") == ["b1"]
    assert all(BATCH_ID not in h for h in await headers_of(nc, "n1"))
    with pytest.raises(ConflictError):
        await store.append_atomic([(placed("n3", "c1"), 0), (placed("n1", "a3"), 0)])


async def test_the_scheduler_sends_a_plan_as_batches_of_whole_nodes(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_apply, "ATOMIC_MIN", 3)
    monkeypatch.setattr(plan_apply, "PLAN_BATCH", 6)
    for node_id in ("n1", "n2", "n3"):
        await h.add_node(node_id, gpus=4)
    await h.start()
    await h.wait_status(await h.run_job("first", count=1), EvalStatus.COMPLETE)  # on n1
    [first] = h.allocs(job_id="first")
    version = h.projector.alloc_versions[first.node_id]
    await h.wait_status(await h.run_job("second", count=11), EvalStatus.COMPLETE)
    assert len(h.allocs(job_id="second")) == 11
    n1 = (await headers_of(h.nc, "n1"))[1:]
    n2, n3 = await headers_of(h.nc, "n2"), await headers_of(h.nc, "n3")
    assert [len(n1), len(n2), len(n3)] == [3, 4, 4]
    # batches of about 6 events, whole nodes: n1's 3 and n2's 4, then n3's 4
    assert len({x[BATCH_ID] for x in n1 + n2}) == 1 and {x[BATCH_ID] for x in n3} == {
        n3[0][BATCH_ID]} and n3[0][BATCH_ID] != n1[0][BATCH_ID]
    assert [x.get(EXPECTED) for x in n1] == [str(version), None, None]
    assert [x.get(EXPECTED) for x in n2] == ["0", None, None, None]


async def test_a_stale_node_fails_its_batch_and_the_plan_is_made_again(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_apply, "ATOMIC_MIN", 3)
    for node_id in ("n1", "n2"):
        await h.add_node(node_id, gpus=4)
    stale = {"n2"}
    h.scheduler.expected_alloc_version = lambda node_id: (
        7 if node_id in stale and not stale.discard(node_id)      # stale once, then true
        else h.projector.alloc_versions.get(node_id, 0))
    await h.start()
    eval_id = await h.run_job(count=8)
    await h.wait_status(eval_id, EvalStatus.COMPLETE)
    assert await h.statuses(eval_id) == ["pending", "scheduling", "applying", "scheduling",
                                         "applying", "complete"]
    allocs = h.allocs(job_id="train")
    assert sorted(a.index for a in allocs) == list(range(8))          # each slot once
    # the first attempt stored nothing, not even n1's part: one batch holds it all
    assert len({x[BATCH_ID] for n in ("n1", "n2") for x in await headers_of(h.nc, n)}) == 1


async def test_a_plan_is_made_and_applied_with_the_heap_frozen_then_restored(
        h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    real = scheduler.apply_plan

    async def watched(*args: Any, **kwargs: Any) -> int:
        seen.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return await real(*args, **kwargs)

    monkeypatch.setattr(scheduler, "apply_plan", watched)
    before = gc.get_threshold()
    await h.add_node("n1", gpus=4)
    await h.start()
    await h.wait_status(await h.run_job(count=3), EvalStatus.COMPLETE)
    # no full collection of the control plane's heap in the middle of a plan
    assert seen and seen[0][0] == CATCH_UP_GC_GEN0 and seen[0][1] > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


async def test_an_empty_decision_appends_nothing_and_keeps_its_version(nc) -> None:  # type: ignore[no-untyped-def]
    store = EventStore(nc)
    assert await store.append_batch([], 7) == 7
    assert await store.append_atomic([([], 7)]) == 0
