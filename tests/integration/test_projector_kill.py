"""kill -9 the projector (a real `herd up` process) mid-stream: after a restart the view
equals a rebuild from sequence 1 (DESIGN §9)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from herdbook.events.codec import encode
from herdbook.events.node import (
    NodeApproved,
    NodeDegraded,
    NodeDeleted,
    NodeInfo,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
)
from herdbook.events.store import stream_last_seq, subject_of
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector import schema
from herdbook.projector.integrity import checkpoint_of
from herdbook.projector.projection import ProjectorRunner
from tests.conftest import wait_until


def random_history(rng: random.Random, count: int, nodes: int) -> list[object]:
    out: list[object] = []
    for _ in range(count):
        node_id = f"node-{rng.randrange(nodes)}"
        kind = rng.choice([NodeRegistered, NodeApproved, NodeRejected, NodeDeleted,
                           NodeDegraded, NodeRecovered, NodeRegistered])
        if kind is NodeRegistered:
            out.append(NodeRegistered(node_id=node_id, boot_id=str(rng.random()),
                                      info=NodeInfo(cpus=rng.randrange(64))))
        elif kind is NodeDegraded:
            out.append(NodeDegraded(node_id=node_id, heartbeat_age=31.0))
        else:
            out.append(kind(node_id=node_id))
    return out


def rows(db: Path) -> dict[str, bytes]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, data FROM nodes").fetchall())


def start_up(url: str, data_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "herdbook.cli", "up", "--nats-url", url, "--data-dir",
             str(data_dir), "--node-id", "cp-test", "--log-level", "warning"],
            stdout=subprocess.DEVNULL, stderr=out)


async def publish_and_settle(nc, events: list[object]) -> int:  # type: ignore[no-untyped-def]
    for event in events:
        await nc.publish(subject_of(event), encode(event))  # the stream captures them
    await nc.flush()
    js = nc.jetstream()
    last, previous = 0, -1
    while last != previous:  # let the server ingest what was published
        previous = last
        await asyncio.sleep(0.5)
        last = await stream_last_seq(js, EVENTS_STREAM)
    return last


async def test_sigkill_mid_stream_then_restart_equals_rebuild(nc, nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("HERD_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed}")
    rng = random.Random(seed)
    head = await publish_and_settle(nc, random_history(rng, 20_000, 500))
    js = nc.jetstream()

    data_dir = tmp_path / "herd"
    db = data_dir / "view.db"
    # Killed while rebuilding from sequence 1 (into view.db.rebuild): the view is all or
    # nothing, never a part of the rebuild; the restart rebuilds it.
    proc = start_up(nats_server.url, data_dir, tmp_path / "up.log")
    try:
        wait_until(lambda: Path(f"{db}.rebuild").exists() or checkpoint_of(db, EVENTS_STREAM) > 0, timeout=30,
                   interval=0.005, what="the rebuild to start")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert checkpoint_of(db, EVENTS_STREAM) in (0, head)
        proc = start_up(nats_server.url, data_dir, tmp_path / "up.log")
        wait_until(lambda: checkpoint_of(db, EVENTS_STREAM) >= head, timeout=60,
                   what="the rebuild after restart")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert not Path(f"{db}.rebuild").exists()

        # Killed mid-way through a catch-up from a checkpoint: it commits as it goes (every
        # 50,000 events; enough of them that the first commit is seen before the last).
        last = await publish_and_settle(nc, random_history(rng, 150_000, 500))
        assert last - head > 30_000
        proc = start_up(nats_server.url, data_dir, tmp_path / "up.log")
        wait_until(lambda: head < checkpoint_of(db, EVENTS_STREAM), timeout=30, interval=0.01,
                   what="the projector to commit its first batch")
        killed_at = checkpoint_of(db, EVENTS_STREAM)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert killed_at < last, "the projector finished before the kill; use more events"

        proc = start_up(nats_server.url, data_dir, tmp_path / "up.log")
        wait_until(lambda: checkpoint_of(db, EVENTS_STREAM) >= last, timeout=60,
                   what="catch-up after restart")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, (tmp_path / "up.log").read_text()

    # rebuild from sequence 1 into a fresh view; the stream is quiet now
    final = await stream_last_seq(js, EVENTS_STREAM)
    assert checkpoint_of(db, EVENTS_STREAM) == final
    fresh = ProjectorRunner(nc, str(tmp_path / "rebuild.db"))
    await fresh.start()
    await fresh.wait_applied(final, timeout=60)
    await fresh.stop()
    assert rows(tmp_path / "rebuild.db") == rows(db)
    assert len(rows(db)) > 0
    # and the in-memory load of the killed-and-resumed db decodes every row
    conn = await schema.open_db(str(db))
    views, seq = await schema.load(conn, EVENTS_STREAM)
    await conn.close()
    assert seq == final and len(views) == len(rows(db))
