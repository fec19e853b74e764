"""View snapshots without a server: when one is due, which ones a start may use, which the
writer drops, and the copy and its checks on real SQLite files."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import pytest

from herdbook.config import ConfigError, ViewConfig, parse_config
from herdbook.control.snapshot_files import Snapshot, copy_view, local_view, unpack
from herdbook.control.snapshots import (
    SNAPSHOTS_STREAM,
    SnapshotWriter,
    due,
    expired,
    headers_of,
    parse,
    restorable,
)
from herdbook.durations import Duration
from herdbook.natsd import users
from herdbook.projector import schema

V = schema.SCHEMA_VERSION


def snap(seq: int, version: int = V, stream: str = "S", created: str = "c1") -> Snapshot:
    return Snapshot(name=f"view-v{version}-{seq}", schema_version=version, seq=seq,
                    stream=stream, stream_created=created)


def test_a_snapshot_is_due_after_enough_events_or_time_and_only_if_the_view_moved() -> None:
    config = ViewConfig(snapshot_every_events=100, snapshot_every=Duration(60.0))
    assert not due(150, 100, 10.0, config)
    assert due(200, 100, 10.0, config)
    assert due(101, 100, 60.0, config)
    assert not due(100, 100, 3600.0, config)      # nothing new: never
    assert due(1, 0, 60.0, config)


def test_a_start_uses_snapshots_of_its_schema_and_stream_with_no_gap_newest_first() -> None:
    snaps = [snap(10), snap(30), snap(20), snap(40, version=V + 1), snap(25, stream="other"),
             snap(15, created="c0"), snap(50)]
    chosen = restorable(snaps, stream="S", first_seq=1, last_seq=45, created="c1")
    assert [s.seq for s in chosen] == [30, 20, 10]          # 50 is beyond the stream's end
    # the stream lost 1..20: only a snapshot at 20 or later leaves no gap
    assert [s.seq for s in restorable(snaps, stream="S", first_seq=21, last_seq=45,
                                      created="c1")] == [30, 20]
    assert restorable(snaps, stream="S", first_seq=1, last_seq=0, created="c1") == []


def test_the_writer_drops_all_but_the_newest_kept() -> None:
    snaps = [snap(10), snap(40), snap(20), snap(30), snap(5, version=V + 1)]
    assert sorted(s.seq for s in expired(snaps, 2)) == [5, 10, 20]
    assert expired([], 3) == []


def test_headers_name_the_schema_version_and_sequence() -> None:
    original = snap(42)
    assert parse(original.name, headers_of(original)) == original
    assert parse("x", {"Herd-Schema-Version": "1", "Herd-Seq": "7", "Herd-Stream": "S"}) == \
        Snapshot(name="x", schema_version=1, seq=7, stream="S")
    assert parse("x", {"Herd-Seq": ["7"]}) is None
    assert parse("x", None) is None


def make_view(path: Path, seq: int, version: int = V) -> None:
    db = sqlite3.connect(path)
    db.executescript(schema.SCHEMA)
    db.execute(f"PRAGMA user_version = {version}")
    db.execute("INSERT INTO nodes VALUES ('n1', '{}')")
    db.execute("INSERT INTO checkpoints VALUES ('S', ?)", (seq,))
    db.execute("INSERT INTO stream_identity VALUES ('S', 'c1')")
    db.commit()
    db.close()


def test_a_copy_carries_its_version_and_checkpoint_and_unpacks_to_the_same_view(
        tmp_path: Path) -> None:
    make_view(tmp_path / "view.db", 17)
    blob, copied = copy_view(tmp_path / "view.db", tmp_path / "work.db", "S")
    assert copied == Snapshot(name=f"view-v{V}-000000000017", schema_version=V, seq=17,
                              stream="S", stream_created="c1")
    assert not (tmp_path / "work.db").exists()
    unpack(blob, copied, tmp_path / "restored.db")
    db = sqlite3.connect(tmp_path / "restored.db")
    assert db.execute("SELECT id FROM nodes").fetchall() == [("n1",)]
    db.close()


def test_unpack_refuses_what_is_not_the_view_its_headers_name(tmp_path: Path) -> None:
    make_view(tmp_path / "view.db", 17)
    blob, copied = copy_view(tmp_path / "view.db", tmp_path / "work.db", "S")
    out = tmp_path / "out.db"
    for bad_blob, claimed, reason in [
            (b"garbage", copied, "does not decompress"),
            (zlib.compress(b"garbage" * 100), copied, "not a view"),
            (blob, snap(18), "at sequence 17")]:
        with pytest.raises(ValueError, match=reason):
            unpack(bad_blob, claimed, out)
        assert not out.exists()


def test_only_a_missing_empty_or_unusable_local_view_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "view.db"
    assert local_view(path, "S") == "missing"
    make_view(path, 0)
    assert local_view(path, "S") == "empty"
    path.unlink()
    make_view(path, 9)
    assert local_view(path, "S") is None
    path.unlink()
    make_view(path, 9, version=V + 1)
    assert "schema version" in str(local_view(path, "S"))
    path.write_bytes(b"not sqlite at all" * 100)
    assert "cannot be read" in str(local_view(path, "S"))


async def test_a_view_is_stamped_with_the_schema_version_and_another_is_refused(
        tmp_path: Path) -> None:
    db = await schema.open_db(str(tmp_path / "view.db"))
    async with db.execute("PRAGMA user_version") as cursor:
        assert await cursor.fetchone() == (V,)
    await db.execute(f"PRAGMA user_version = {V + 1}")
    await db.close()
    with pytest.raises(sqlite3.DatabaseError, match="schema version"):
        await schema.open_db(str(tmp_path / "view.db"))


def test_the_operators_denials_name_the_snapshots_stream() -> None:
    assert users.SNAPSHOTS_STREAM == SNAPSHOTS_STREAM
    denied = users.operator_permissions("op-a")["publish"]["deny"]
    assert f"$JS.API.STREAM.MSG.GET.{SNAPSHOTS_STREAM}" in denied


def test_bad_view_settings_are_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match="view.snapshot_every_events"):
        parse_config("view: {snapshot_every_events: 0}")
    with pytest.raises(ConfigError, match="view.snapshot_every"):
        parse_config("view: {snapshot_every: 0s}")
    assert parse_config("view: {snapshots: false}").view.snapshots is False


async def test_stop_ends_the_loop_even_when_a_nats_call_turns_the_cancel_into_an_error(
        tmp_path: Path) -> None:
    """nats-py can answer a cancel inside a request with an ordinary error; the loop
    takes that as one failed poll and would poll on for ever, and a control plane whose
    start failed then never stopped (seen: `herd up --http-port <taken>` hung)."""
    import asyncio

    from tests.fakes import FakeClock

    class Writer(SnapshotWriter):
        async def _store(self):  # type: ignore[no-untyped-def, override]
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise RuntimeError("nats: connection closed") from None

    writer = Writer(None, tmp_path / "view.db", lambda: 0, ViewConfig(),  # type: ignore[arg-type]
                    clock=FakeClock())
    await writer.start()
    await asyncio.sleep(0.05)
    await asyncio.wait_for(writer.stop(), 5)
