"""The projector catching up: a backlog is committed in a few coalesced transactions,
not one per ``batch_size``; whoever waits for an event is released as soon as it is
folded, never after a coalescing window; and the view is the one small batches give."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from pathlib import Path

from herdbook.events.codec import encode
from herdbook.events.node import NodeDegraded, NodeRecovered, NodeRegistered
from herdbook.events.store import EventStore, stream_last_seq, subject_of
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector import fresh_view, schema
from herdbook.projector.catch_up_gc import CATCH_UP_GC_GEN0
from herdbook.projector.integrity import checkpoint_of
from herdbook.projector.projection import ProjectorRunner
from tests.integration.test_backlog_reader import fill


def dump(db: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute("SELECT * FROM nodes").fetchall())


async def test_a_backlog_is_committed_in_a_few_transactions(nc, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for i in range(12_000):
        kind = (NodeRegistered, NodeDegraded, NodeRecovered)[i % 3]
        event = (kind(node_id=f"n{i % 40}") if kind is not NodeDegraded
                 else NodeDegraded(node_id=f"n{i % 40}", heartbeat_age=31.0))
        await nc.publish(subject_of(event), encode(event))
    last = await fill(nc, 0)
    commits: list[int] = []
    real = schema.write_batch

    async def counting(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        commits.append(args[4])
        await real(*args, **kwargs)

    monkeypatch.setattr(schema, "write_batch", counting)
    runner = ProjectorRunner(nc, str(tmp_path / "coalesced.db"), batch_size=1000,
                             catch_up_events=50_000, catch_up_interval=120.0)
    await runner.start()
    await runner.wait_applied(last, timeout=60)   # released long before the 120 s window
    assert runner.live
    await runner.stop()
    assert commits[-1] == last
    assert len(commits) <= 3, commits             # 1,000-event batches would be 12

    monkeypatch.setattr(schema, "write_batch", real)
    small = ProjectorRunner(nc, str(tmp_path / "small.db"), batch_size=100, catch_up_events=100)
    await small.start()
    await small.wait_applied(last, timeout=60)
    await small.stop()
    assert dump(tmp_path / "coalesced.db") == dump(tmp_path / "small.db")


async def test_a_rebuilds_last_commit_runs_under_the_catch_up_gc(nc, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The commit that installs a rebuild encodes every row: young objects are collected
    as rarely as while folding, and the folded view is frozen (no collection walks it);
    both undone once it is installed."""
    last = await fill(nc, 3000)
    seen: list[tuple[int, bool]] = []
    real = schema.write_batch

    async def watching(db, stream, views, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        row = next(iter(views.values()))
        seen.append((gc.get_threshold()[0],
                     not any(row is obj for obj in gc.get_objects(2))))
        await real(db, stream, views, *args, **kwargs)

    monkeypatch.setattr(schema, "write_batch", watching)
    runner = ProjectorRunner(nc, str(tmp_path / "view.db"))
    await runner.start()
    try:
        await runner.wait_applied(last, timeout=30)
        assert seen[0] == (CATCH_UP_GC_GEN0, True)   # the install's commit
        for _ in range(100):   # the follower leaves the catch-up gc once it installed the view
            if gc.get_threshold()[0] != CATCH_UP_GC_GEN0:
                break
            await asyncio.sleep(0.05)
        assert gc.get_threshold()[0] != CATCH_UP_GC_GEN0 and gc.get_freeze_count() == 0
    finally:
        await runner.stop()


async def test_once_live_a_waiter_is_released_at_once(nc, tmp_path) -> None:  # type: ignore[no-untyped-def]
    last = await fill(nc, 2000)
    runner = ProjectorRunner(nc, str(tmp_path / "view.db"), batch_size=10_000,
                             batch_interval=120.0, catch_up_interval=120.0)
    await runner.start()
    await runner.wait_applied(last, timeout=30)
    store = EventStore(nc)
    try:
        for i in range(5):
            seq = await store.append(NodeRegistered(node_id=f"live{i}"))
            await runner.wait_applied(seq, timeout=30)   # not after the 120 s windows
            assert runner.committed_seq >= seq and f"live{i}" in runner.nodes
    finally:
        await runner.stop()
    assert await stream_last_seq(nc.jetstream(), EVENTS_STREAM) == last + 5


async def test_a_bad_message_in_the_backlog_is_dead_lettered_and_passed(nc, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dead: list[bytes] = []

    async def on_dead(msg) -> None:  # type: ignore[no-untyped-def]
        dead.append(msg.data)

    await nc.subscribe("herd.deadletter.HERD_EVENTS", cb=on_dead)
    await fill(nc, 10)
    await nc.publish("herd.node.n1.registered", b"not json")
    last = await fill(nc, 10)
    runner = ProjectorRunner(nc, str(tmp_path / "view.db"))
    await runner.start()
    await runner.wait_applied(last, timeout=30)
    await runner.stop()
    assert runner.deadletters == 1 and runner.failed is None
    await nc.flush()
    assert dead == [b"not json"]
    assert runner.committed_seq == last and len(runner.nodes) == 10   # and went on past it


async def test_a_rebuild_from_sequence_1_goes_into_a_fresh_file(nc, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for i in range(6_000):
        event = NodeRegistered(node_id=f"n{i % 40}") if i % 2 else NodeRecovered(node_id=f"n{i % 40}")
        await nc.publish(subject_of(event), encode(event))
    half = await fill(nc, 0)
    db = tmp_path / "view.db"
    commits: list[tuple[int, int]] = []
    real = schema.write_batch

    async def counting(*args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        await real(*args, **kwargs)
        commits.append((args[4], checkpoint_of(db, EVENTS_STREAM)))   # (committed, what view.db holds)

    monkeypatch.setattr(schema, "write_batch", counting)
    runner = ProjectorRunner(nc, str(db), batch_size=100, catch_up_events=100)
    await runner.start()
    assert runner.committed_seq == 0
    await runner.wait_applied(half - 1_000, timeout=60)   # released once the view has it
    assert checkpoint_of(db, EVENTS_STREAM) == half and runner.committed_seq == half
    await runner.stop()
    # One commit (not one per 100 events), into view.db.rebuild while view.db stayed
    # empty; then the rebuilt file replaced the view whole.
    assert commits == [(half, 0)], commits
    assert not Path(f"{db}.rebuild").exists()

    # From a checkpoint, a catch-up commits into the view as it goes (coalesced).
    for i in range(3_000):
        await nc.publish(subject_of(NodeRecovered(node_id=f"n{i % 40}")),
                         encode(NodeRecovered(node_id=f"n{i % 40}")))
    last = await fill(nc, 0)
    commits.clear()
    runner = ProjectorRunner(nc, str(db), batch_size=100, catch_up_events=100)
    await runner.start()
    await runner.wait_applied(last, timeout=60)
    await runner.stop()
    assert commits and all(seq == held for seq, held in commits), commits
    assert checkpoint_of(db, EVENTS_STREAM) == last


async def test_a_rebuild_whose_rename_fails_is_installed_on_the_next_try(nc, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    for i in range(500):
        event = NodeRegistered(node_id=f"n{i % 40}")
        await nc.publish(subject_of(event), encode(event))
    last = await fill(nc, 0)
    real = fresh_view._install_file
    tries: list[str] = []

    def full_once(fresh: str, path: str) -> None:
        tries.append(fresh)
        if len(tries) == 1:
            raise OSError(28, "No space left on device")
        real(fresh, path)

    monkeypatch.setattr(fresh_view, "_install_file", full_once)
    db = tmp_path / "view.db"
    runner = ProjectorRunner(nc, str(db))
    await runner.start()
    await runner.wait_applied(last, timeout=20)   # after the second try, a second later
    assert len(tries) == 2 and runner.failed is None
    await runner.stop()
    assert checkpoint_of(db, EVENTS_STREAM) == last and len(dump(db)) == 40
