"""The view never silently disagrees with the stream: one folded from another history of
the stream and a corrupt view file are each found at start, moved aside and rebuilt from
sequence 1, with one log line saying why; a stream the streams guard recreated after a
loss, or the start created again after the view (the NATS store wiped), keeps it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import Config, parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.control.plane import ControlPlane
from herdbook.events.node import NodeDeclared
from herdbook.events.store import EventStore, stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM, HEALTH_STREAM, HEARTBEATS_STREAM
from herdbook.projector.projection import ProjectorRunner
from tests.conftest import free_port, wait_until

RUNNER_LOG = "herdbook.projector.projection"


def config(tmp_path: Path, port: int) -> Config:
    return parse_config(f"nats: {{port: {port}}}\ndata_dir: '{tmp_path / 'd'}'\n"
                        "node_id: cp-view\nlifecycle: {heartbeat_timeout: 30s}\n")


async def api(nc: Any, route: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(f"herd.api.v1.{route}", json.dumps(body).encode(), timeout=10)
    reply: dict[str, Any] = json.loads(msg.data)
    assert reply["ok"], reply
    result: dict[str, Any] = reply["result"]
    return result


async def node_ids(nc: Any) -> set[str]:
    return {n["id"] for n in (await api(nc, "node.list", {}))["items"]}


def rebuild_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == RUNNER_LOG and "rebuilding it from sequence 1" in r.getMessage()]


async def run_plane(cfg: Config, step: Callable[[ControlPlane, Any], Any]) -> Any:
    plane = bootstrap(cfg, clock=SYSTEM_CLOCK)
    await plane.start()
    nc = await nats.connect(plane.url)
    try:
        return await step(plane, nc)
    finally:
        await nc.close()
        await plane.stop()


async def test_a_wiped_nats_store_keeps_the_view_and_every_node_is_commandable(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # given: a control plane that folded a few nodes, stopped
    cfg = config(tmp_path, free_port())

    async def add_old(plane: ControlPlane, nc: Any) -> int:
        for node in ("old-1", "old-2", "old-3"):
            await api(nc, "node.add", {"id": node})
        return plane.projector.committed_seq

    checkpoint = await run_plane(cfg, add_old)
    # when: the NATS store is wiped and the view kept
    shutil.rmtree(tmp_path / "d" / "nats" / "jetstream")

    async def after_wipe(plane: ControlPlane, nc: Any) -> dict[str, Any]:
        js = nc.jetstream()
        first = (await js.stream_info(EVENTS_STREAM)).config.first_seq
        assert first == checkpoint + 1, "created again after the view, not from 1"
        # the health classifier decides only on reports after those it decided on (their
        # sequences are in HERD_EVENTS): the lost health stream starts beyond any of them
        assert (await js.stream_info(HEALTH_STREAM)).config.first_seq > 10**15
        added = await api(nc, "node.add", {"id": "new-1"})
        assert added["node"] is not None, "the new event was taken for one already folded"
        # a node the lost events made is commanded: its version was rebased
        cordoned = await nc.request("herd.api.v1.node.cordon",
                                    json.dumps({"id": "old-1"}).encode(), timeout=10)
        assert json.loads(cordoned.data)["ok"], cordoned.data
        assert await node_ids(nc) == {"cp-view", "old-1", "old-2", "old-3", "new-1"}
        status: dict[str, Any] = await api(nc, "status", {})
        return status

    with caplog.at_level(logging.WARNING):
        status = await run_plane(cfg, after_wipe)

    # then: nothing rebuilt, one ERROR line saying what was lost; new events folded
    assert rebuild_lines(caplog) == []
    lost = sorted(r.getMessage().split()[1] for r in caplog.records
                  if r.levelno == logging.ERROR and r.name == "herdbook.control.nats_parts"
                  and "was missing" in r.getMessage())
    assert lost == sorted([EVENTS_STREAM, HEALTH_STREAM, HEARTBEATS_STREAM]), lost
    assert status["projector_lag"] == 0
    assert status["projector_seq"] == status["stream_last_seq"] > checkpoint
    assert not list((tmp_path / "d").glob("view.db.stale-*"))


async def test_garbage_in_the_view_file_is_moved_aside_and_rebuilt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = config(tmp_path, free_port())

    async def add(plane: ControlPlane, nc: Any) -> None:
        await api(nc, "node.add", {"id": "kept"})

    await run_plane(cfg, add)
    view = tmp_path / "d" / "view.db"
    garbage = random.Random(14).randbytes(64 * 1024)
    view.write_bytes(garbage)

    async def listed(plane: ControlPlane, nc: Any) -> set[str]:
        return await node_ids(nc)

    with caplog.at_level(logging.WARNING):
        assert await run_plane(cfg, listed) == {"cp-view", "kept"}
    lines = rebuild_lines(caplog)
    assert len(lines) == 1 and "file is not a database" in lines[0], lines
    assert not [r for r in caplog.records if r.exc_info]
    [aside] = (tmp_path / "d").glob("view.db.corrupt-*")
    assert aside.read_bytes() == garbage


async def fold(nc: Any, db: Path, timeout: float = 10.0) -> ProjectorRunner:
    """A projector on ``db`` that has folded the whole stream, stopped."""
    runner = ProjectorRunner(nc, str(db), batch_interval=0.01)
    await runner.start()
    last = await stream_last_seq(nc.jetstream(), EVENTS_STREAM)
    if last:
        await runner.wait_applied(last, timeout)
    await runner.stop()
    return runner


async def declare(nc: Any, *nodes: str, reason: str = "") -> None:
    store = EventStore(nc)
    for node in nodes:
        await store.append(NodeDeclared(node_id=node, reason=reason), expected_version=0)


async def test_a_view_of_another_history_of_the_stream_is_rebuilt(
        nc: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # given: a view of three events
    db = tmp_path / "view.db"
    await declare(nc, "a", "b", "c")
    await fold(nc, db)
    # when: the stream is deleted and created again, and gets more events than the view
    await nc.jetstream().delete_stream(EVENTS_STREAM)
    await ensure_streams(nc, 1, 3600.0)
    await declare(nc, *(f"n{i}" for i in range(5)))
    # then: the checkpoint (3) is behind the stream's end (5), but it is not this stream's
    with caplog.at_level(logging.WARNING):
        runner = await fold(nc, db)
    lines = rebuild_lines(caplog)
    assert len(lines) == 1 and f"was folded from another {EVENTS_STREAM}" in lines[0], lines
    assert set(runner.nodes) == {f"n{i}" for i in range(5)}


async def test_a_stream_the_guard_recreated_after_a_loss_keeps_the_view(
        nc: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "view.db"
    await declare(nc, "a", "b", "c")
    await fold(nc, db)
    # when: recreated as the streams guard does: starting after what was read
    js = nc.jetstream()
    config = (await js.stream_info(EVENTS_STREAM)).config
    await js.delete_stream(EVENTS_STREAM)
    await js.add_stream(dataclasses.replace(config, first_seq=4))
    await ensure_streams(nc, 1, 3600.0)   # what every herd up does at start: keeps first_seq
    await declare(nc, "d")
    with caplog.at_level(logging.WARNING):
        runner = await fold(nc, db)
    # then: what the view folded before stays; nothing is rebuilt; the next start is quiet
    assert rebuild_lines(caplog) == []
    assert set(runner.nodes) == {"a", "b", "c", "d"}
    # the versions the lost events gave are the new stream's (none): rebased to 0
    assert {n: v.version for n, v in runner.nodes.items()} == {"a": 0, "b": 0, "c": 0, "d": 4}
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        await fold(nc, db)
    assert not [r for r in caplog.records if r.name.startswith("herdbook.projector")]


async def test_a_view_catches_up_at_once_with_a_stream_created_again_empty(
        nc: Any, tmp_path: Path) -> None:
    """An empty stream created from 7 says last_seq 6, which no message holds: the
    catch-up every start waits for returned only after its 60 s timeout, as ``Error:``."""
    await declare(nc, "a", "b", "c")
    js = nc.jetstream()
    config = (await js.stream_info(EVENTS_STREAM)).config
    await js.delete_stream(EVENTS_STREAM)
    await js.add_stream(dataclasses.replace(config, first_seq=7))
    runner = ProjectorRunner(nc, str(tmp_path / "view.db"), batch_interval=0.01)
    await runner.start()
    try:
        await runner.catch_up(timeout=2.0)
    finally:
        await runner.stop()


async def test_a_truncated_view_file_is_rebuilt(
        nc: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "view.db"
    nodes = [f"n{i:03d}" for i in range(200)]
    await declare(nc, *nodes, reason="r" * 500)
    await fold(nc, db)
    data = db.read_bytes()
    assert len(data) > 100_000
    db.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        runner = await fold(nc, db)
    lines = rebuild_lines(caplog)
    assert len(lines) == 1 and "cannot be read" in lines[0], lines
    assert set(runner.nodes) == set(nodes)


@pytest.fixture
async def stopped_view(tmp_path: Path) -> AsyncIterator[tuple[Path, int]]:
    """A data dir whose view holds one node, its control plane stopped."""
    port = free_port()

    async def add(plane: ControlPlane, nc: Any) -> None:
        await api(nc, "node.add", {"id": "kept"})

    await run_plane(config(tmp_path, port), add)
    yield tmp_path / "d", port


def test_herd_up_with_a_garbage_view_starts_with_one_line_and_no_traceback(
        stopped_view: tuple[Path, int]) -> None:
    data_dir, port = stopped_view
    (data_dir / "view.db").write_bytes(b"this is not a database\n" * 1000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "herdbook.cli", "up", "--data-dir", str(data_dir),
         "--nats-port", str(port), "--node-id", "cp-view"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"})
    try:
        url = f"nats://127.0.0.1:{port}"
        listed = [sys.executable, "-m", "herdbook.cli", "--server", url, "node", "list",
                  "-o", "json"]
        wait_until(lambda: "kept" in subprocess.run(listed, capture_output=True,
                                                    text=True).stdout,
                   timeout=30, what="herd up to answer with the rebuilt view")
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "view" in line and "moved it to" in line]
    assert len(said) == 1 and "file is not a database" in said[0], stderr
    assert "is up" in stdout


async def test_a_view_it_wrote_itself_is_never_moved_aside(tmp_path: Path) -> None:
    """`herd view rebuild`, then a restart: the checks at start find nothing to say."""
    cfg = config(tmp_path, free_port())

    async def rebuild(plane: ControlPlane, nc: Any) -> dict[str, Any]:
        await api(nc, "node.add", {"id": "x"})
        await api(nc, "view.rebuild", {})
        return await api(nc, "status", {})

    status = await run_plane(cfg, rebuild)
    assert status["projector_lag"] == 0

    async def listed(plane: ControlPlane, nc: Any) -> set[str]:
        return await node_ids(nc)

    assert await run_plane(cfg, listed) == {"cp-view", "x"}
    assert not list((tmp_path / "d").glob("view.db.*-*"))
