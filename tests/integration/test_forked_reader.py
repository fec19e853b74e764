"""The projector reading a large backlog through a forked child (``forked_reader``),
against a real nats-server: the same view as reading it in process, dead letters
included; a child that dies, stalls or cannot connect leaves the rest to the parent
with every event folded once; a fold that fails stops the child; no child is left."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from herdbook.events import forked_reader
from herdbook.events.codec import encode
from herdbook.events.node import NodeApproved, NodeDegraded, NodeRegistered
from herdbook.events.store import subject_of
from herdbook.projector.runner import ProjectorRunner
from tests.conftest import settle

pytestmark = pytest.mark.skipif(not forked_reader.available(), reason="fork: Linux only")


async def fill(nc: Any, count: int) -> int:
    for i in range(count):
        node = f"n{i % 200}"
        event = (NodeRegistered(node_id=node) if i % 3 == 0 else NodeApproved(node_id=node)
                 if i % 3 == 1 else NodeDegraded(node_id=node, heartbeat_age=31.0))
        subject = subject_of(event)
        if i % 997 == 5:   # a body its subject does not vouch for: dead-lettered
            subject = subject.replace(f".{node}.", ".n-other.")
        await nc.publish(subject, encode(event), headers={"Nats-Msg-Id": event.event_id})
    await nc.flush()
    return await settle(nc)


async def rebuild(nc: Any, db: Path, last: int, connect: dict[str, Any] | None) -> dict[str, Any]:
    runner = ProjectorRunner(nc, str(db))
    runner.fork_min = 100
    if connect is not None:
        runner.backlog_connect = lambda: connect
    await runner.start()
    try:
        await runner.wait_applied(last, timeout=60)
        assert runner.failed is None
        return {"nodes": dict(runner.nodes.rows), "deadletters": runner.deadletters,
                "folded": runner.folded_seq}
    finally:
        await runner.stop()


async def no_child_left(before: set[int]) -> None:
    for _ in range(100):
        if children() == before:
            return
        await asyncio.sleep(0.02)
    assert children() == before


def children() -> set[int]:
    me = str(os.getpid())
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[1] == me:   # ppid, whatever the state (a zombie included)
                found.add(int(entry.name))
    return found


@pytest.fixture
async def filled(nc, nats_server) -> tuple[Any, str, int]:  # type: ignore[no-untyped-def]
    return nc, nats_server.url, await fill(nc, 6_000)


@pytest.fixture
def reached(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Where each forked read ended (``ForkedBacklog.run``'s return)."""
    read = forked_reader.ForkedBacklog.run
    ends: list[int] = []

    async def run(self: forked_reader.ForkedBacklog) -> int:
        ends.append(await read(self))
        return ends[-1]

    monkeypatch.setattr(forked_reader.ForkedBacklog, "run", run)
    return ends


async def test_a_forked_read_folds_the_view_a_read_in_process_folds(filled, tmp_path,  # type: ignore[no-untyped-def]
                                                                   reached) -> None:
    nc, url, last = filled
    before = children()
    here = await rebuild(nc, tmp_path / "here.db", last, None)
    forked = await rebuild(nc, tmp_path / "forked.db", last, {"servers": [url]})
    assert reached == [last]   # all of it read by the child
    assert forked == here and here["deadletters"] == 7 and here["folded"] == last
    await no_child_left(before)   # the child was collected


@pytest.mark.parametrize("how", ["dies", "stalls", "cannot connect"])
async def test_a_child_that_fails_leaves_the_rest_to_the_parent(filled, tmp_path, monkeypatch,  # type: ignore[no-untyped-def]
                                                                 reached, how: str) -> None:
    nc, url, last = filled
    here = await rebuild(nc, tmp_path / "here.db", last, None)
    sent = [0]
    write_all = forked_reader._write_all

    def failing(fd: int, data: bytes) -> None:   # runs in the child (forked memory)
        sent[0] += 1
        if sent[0] == 3:
            if how == "dies":
                os._exit(9)
            import time
            time.sleep(60)
        write_all(fd, data)

    monkeypatch.setattr(forked_reader, "_write_all", failing)
    monkeypatch.setattr(forked_reader, "STALL", 1.0)
    connect = {"servers": ["nats://127.0.0.1:1"], "connect_timeout": 0.5,
               "max_reconnect_attempts": 0} if how == "cannot connect" else {"servers": [url]}
    before = children()
    forked = await rebuild(nc, tmp_path / "forked.db", last, connect)
    assert len(reached) == 1 and (0 < reached[0] < last if how != "cannot connect"
                                  else reached[0] == 0)
    assert forked == here
    await no_child_left(before)


async def test_a_fold_that_fails_stops_the_child(filled, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    nc, url, last = filled
    runner = ProjectorRunner(nc, str(tmp_path / "view.db"))
    runner.fork_min = 100
    runner.backlog_connect = lambda: {"servers": [url]}
    fold = runner.model.fold

    def breaking(seq: int, event: Any) -> None:
        if seq == 3000:
            raise RuntimeError("a fold bug")
        fold(seq, event)

    monkeypatch.setattr(runner.model, "fold", breaking)
    before = children()
    await runner.start()
    for _ in range(100):
        if runner.failed is not None:
            break
        await asyncio.sleep(0.05)
    await runner.stop()
    assert runner.failed is not None and "sequence 3000" in runner.failed
    assert runner.folded_seq == 2999
    await no_child_left(before)


async def test_a_stop_while_the_child_reads_collects_it_and_keeps_what_was_folded(  # type: ignore[no-untyped-def]
        nc, nats_server, tmp_path, monkeypatch) -> None:
    last = await fill(nc, 20_000)
    write_all = forked_reader._write_all

    def slow(fd: int, data: bytes) -> None:   # the child, slowed: a stop lands mid-read
        import time
        time.sleep(0.05)
        write_all(fd, data)

    monkeypatch.setattr(forked_reader, "_write_all", slow)
    db = tmp_path / "view.db"
    runner = ProjectorRunner(nc, str(db))
    runner.fork_min = 100
    runner.backlog_connect = lambda: {"servers": [nats_server.url]}
    before = children()
    await runner.start()
    for _ in range(200):
        if runner.folded_seq > 0:
            break
        await asyncio.sleep(0.02)
    await runner.stop()
    stopped_at = runner.folded_seq
    assert 0 < stopped_at < last
    await no_child_left(before)
    monkeypatch.setattr(forked_reader, "_write_all", write_all)
    again = await rebuild(nc, db, last, {"servers": [nats_server.url]})   # goes on from there
    here = await rebuild(nc, tmp_path / "here.db", last, None)
    assert (again["nodes"], again["folded"]) == (here["nodes"], here["folded"])
