"""View snapshots against a real nats-server: a wiped view restores the newest snapshot
and folds only the tail; a snapshot of another schema version, a corrupt one, or one the
stream no longer continues is ignored and the view is folded from sequence 1; the writer
keeps the newest few; agents and operators can neither read nor write the bucket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import ObjectMeta, StreamConfig
from nats.js.object_store import ObjectStore

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import ViewConfig, parse_config
from herdbook.control import snapshots
from herdbook.control.bootstrap import bootstrap
from herdbook.control.snapshot_files import Snapshot
from herdbook.control.snapshots import BUCKET, SnapshotWriter, headers_of, listed, restore
from herdbook.events.codec import encode
from herdbook.events.node import NodeRegistered
from herdbook.events.store import subject_of
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.projector import schema
from herdbook.projector.projection import ProjectorRunner
from tests.conftest import free_port
from tests.fakes import FakeClock
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually
from tests.integration.test_auth import connect_as, issue, plane  # noqa: F401 - the auth plane

STREAM = "SNAPTEST"
"""A stream of its own (the herd streams forbid purges): every herd subject, as HERD_EVENTS."""


@pytest.fixture
async def client(nats_server: EmbeddedNats) -> AsyncIterator[Any]:
    nc = await nats.connect(nats_server.url)
    await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=["herd.>"]))
    try:
        yield nc
    finally:
        await nc.close()


async def publish(nc: Any, prefix: str, count: int) -> int:
    """``count`` registrations of nodes ``<prefix>-<i>``; returns the last sequence."""
    js = nc.jetstream()
    seq = 0
    for i in range(count):
        event = NodeRegistered(node_id=f"{prefix}-{i}", boot_id="b")
        seq = (await js.publish(subject_of(event), encode(event))).seq
    return seq


async def fold(nc: Any, db: Path) -> tuple[ProjectorRunner, list[str]]:
    """A projector of STREAM on ``db``, caught up; the node ids it folded, in order."""
    runner = ProjectorRunner(nc, str(db), stream=STREAM)
    folded: list[str] = []
    runner.nodes.subscribe(lambda key, row, event: folded.append(key))
    await runner.start()
    await runner.catch_up()
    return runner, folded


def wipe(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


async def snapshot_of(nc: Any, tmp_path: Path, count: int, *, kept: int = 3
                      ) -> tuple[SnapshotWriter, Snapshot]:
    """``count`` events folded into a view and snapshotted; the view then wiped."""
    await publish(nc, "old", count)
    db = tmp_path / "view.db"
    runner, _ = await fold(nc, db)
    writer = SnapshotWriter(nc, db, lambda: runner.committed_seq, ViewConfig(snapshots_kept=kept),
                            clock=FakeClock(), stream=STREAM)
    snap = await writer.snapshot()
    await runner.stop()
    wipe(db)
    assert snap is not None and snap.seq == count
    return writer, snap


async def test_a_wiped_view_restores_the_snapshot_and_folds_only_the_tail(tmp_path: Path) -> None:
    config = (f"nats: {{port: {free_port()}}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp-snap\n"
              "view: {snapshot_every_events: 50}\n")
    async with running_plane(config) as control:
        last = await publish(control.nc, "old", 200)
        await control.projector.wait_applied(last)
        obs = await control.nc.jetstream().object_store(BUCKET)

        async def snapshotted() -> bool:
            return any(snap.seq >= last for snap in await listed(obs))
        await eventually(snapshotted, timeout=20)
        await control.projector.wait_applied(await publish(control.nc, "tail", 20))
    wipe(tmp_path / "d" / "view.db")

    control = bootstrap(parse_config(config), clock=SYSTEM_CLOCK)
    folded: list[str] = []
    control.projector.nodes.subscribe(lambda key, row, event: folded.append(key))
    await control.start()
    try:
        assert not [key for key in folded if key.startswith("old-")]
        assert sorted(key for key in folded if key.startswith("tail-")) == sorted(
            f"tail-{i}" for i in range(20))
        assert {f"old-{i}" for i in range(200)} <= set(control.projector.nodes)
    finally:
        await control.stop()


async def test_a_snapshot_of_another_schema_version_is_ignored(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await snapshot_of(client, tmp_path, 30)
    await publish(client, "tail", 5)
    monkeypatch.setattr(snapshots, "SCHEMA_VERSION", 2)   # a herd whose view changed
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    assert await restore(client, tmp_path / "view.db", stream=STREAM) is None
    runner, folded = await fold(client, tmp_path / "view.db")
    await runner.stop()
    assert len(folded) == 35


async def test_a_view_of_another_schema_version_is_rebuilt_from_sequence_1(
        client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "view.db"
    await publish(client, "old", 10)
    runner, _ = await fold(client, db)
    await runner.stop()
    monkeypatch.setattr(schema, "SCHEMA_VERSION", 2)
    runner, folded = await fold(client, db)
    await runner.stop()
    assert len(folded) == 10
    assert list(tmp_path.glob("view.db.corrupt-*"))


async def test_a_corrupt_snapshot_is_ignored(client: Any, tmp_path: Path) -> None:
    writer, good = await snapshot_of(client, tmp_path, 30)
    last = await publish(client, "tail", 5)
    obs = await client.jetstream().object_store(BUCKET)
    bad = Snapshot(name="view-v1-bad", schema_version=schema.SCHEMA_VERSION, seq=last,
                   stream=STREAM, stream_created=good.stream_created)
    await obs.put(bad.name, b"not a view", meta=ObjectMeta(name=bad.name, headers=headers_of(bad)))
    # the corrupt newest one is skipped for the good older one...
    assert await restore(client, tmp_path / "view.db", stream=STREAM) == good
    wipe(tmp_path / "view.db")
    # ...and with only the corrupt one, the view is folded from sequence 1
    await obs.delete(good.name)
    assert await restore(client, tmp_path / "view.db", stream=STREAM) is None
    runner, folded = await fold(client, tmp_path / "view.db")
    await runner.stop()
    assert len(folded) == 35


async def test_a_stream_purged_past_the_snapshot_is_folded_from_what_it_holds(
        client: Any, tmp_path: Path) -> None:
    await snapshot_of(client, tmp_path, 10)
    await publish(client, "tail", 10)                  # sequences 11..20
    await client.jetstream().purge_stream(STREAM, seq=15)   # 11..14 are gone
    assert await restore(client, tmp_path / "view.db", stream=STREAM) is None
    runner, folded = await fold(client, tmp_path / "view.db")
    await runner.stop()
    assert folded == [f"tail-{i}" for i in range(4, 10)]


async def test_a_good_local_view_is_never_replaced(client: Any, tmp_path: Path) -> None:
    writer, _ = await snapshot_of(client, tmp_path, 10)
    await publish(client, "tail", 5)
    runner, _ = await fold(client, tmp_path / "view.db")     # from sequence 1: 15 events
    await runner.stop()
    before = (tmp_path / "view.db").read_bytes()
    assert await restore(client, tmp_path / "view.db", stream=STREAM) is None
    assert (tmp_path / "view.db").read_bytes() == before


async def test_the_writer_keeps_the_newest_snapshots_only(client: Any, tmp_path: Path) -> None:
    db = tmp_path / "view.db"
    runner, _ = await fold(client, db)
    writer = SnapshotWriter(client, db, lambda: runner.committed_seq,
                            ViewConfig(snapshots_kept=2), clock=FakeClock(), stream=STREAM)
    written = []
    try:
        for round_ in range(4):
            await runner.wait_applied(await publish(client, f"r{round_}", 3))
            snap = await writer.snapshot()
            assert snap is not None
            written.append(snap.seq)
        assert await writer.snapshot() is None      # nothing new since the last one
    finally:
        await runner.stop()
    obs = await client.jetstream().object_store(BUCKET)
    assert sorted(s.seq for s in await listed(obs)) == written[-2:]
    # no delete markers pile up either: only the kept ones' metadata is left
    assert len(await obs.list(ignore_deletes=False)) == 2


async def test_agents_and_operators_can_neither_read_nor_write_the_snapshots(
        plane: Any, tmp_path: Path) -> None:  # noqa: F811 - the auth plane fixture
    control_js = plane.nc.jetstream()
    obs = await eventually(lambda: control_js.object_store(BUCKET))   # the leader's writer made it
    await obs.put("view-v1-000000000001", b"secret")
    agent_errors: list[str] = []
    agent = await connect_as(plane, await issue(tmp_path, "agent", "gpu-1"), agent_errors)
    operator_errors: list[str] = []
    operator = await connect_as(plane, await issue(tmp_path, "operator"), operator_errors)
    try:
        for nc in (agent, operator):
            js = nc.jetstream(timeout=1)
            with pytest.raises(Exception):  # noqa: B017 - refused by NATS: no reply
                await js.object_store(BUCKET)
            # bound without the stream lookup, as a hand-written client would
            theirs = ObjectStore(name=BUCKET, stream=f"OBJ_{BUCKET}", js=js)
            with pytest.raises(Exception):  # noqa: B017
                await asyncio.wait_for(theirs.get("view-v1-000000000001"), 5)
            with pytest.raises(Exception):  # noqa: B017
                await asyncio.wait_for(theirs.put("view-v1-000000000002", b"forged"), 5)
            with pytest.raises(Exception):  # noqa: B017
                await nc.request(f"$JS.API.CONSUMER.CREATE.OBJ_{BUCKET}.mine",
                                 json.dumps({"stream_name": f"OBJ_{BUCKET}",
                                             "config": {"name": "mine"}}).encode(), timeout=1)
    finally:
        await agent.close()
        await operator.close()
    assert [info.name for info in await obs.list()] == ["view-v1-000000000001"]
    assert (await obs.get("view-v1-000000000001")).data == b"secret"
