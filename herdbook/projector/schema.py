"""SQLite view schema and the thin layer that reads and writes it.

The stream sequence checkpoint is written in the same transaction as the view rows
(``write_batch``), so a kill at any moment leaves rows and checkpoint consistent.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import aiosqlite
import msgspec

from herdbook.projector import integrity
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS evals (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS allocs (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS alloc_versions (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS pools (
    id   TEXT PRIMARY KEY,
    size INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
    stream TEXT PRIMARY KEY,
    seq    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS stream_identity (
    stream  TEXT PRIMARY KEY,
    created TEXT NOT NULL
);
"""

SCHEMA_VERSION = 1
"""The view's layout, kept in ``PRAGMA user_version``: bump it with any change to SCHEMA
or to how rows are encoded. A view (or a snapshot, ``control/snapshots.py``) of another
version is not used: the view is rebuilt from sequence 1."""

_encoder = msgspec.json.Encoder()
_view_decoder = msgspec.json.Decoder(NodeView)
DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    "instances": msgspec.json.Decoder(InstanceView),
    "evals": msgspec.json.Decoder(EvalView),
    "jobs": msgspec.json.Decoder(JobView),
    "allocs": msgspec.json.Decoder(AllocView),
    "alloc_versions": msgspec.json.Decoder(int),
}
TableRows = tuple[str, Mapping[str, Any], Iterable[str]]
"""(table, its views by id, the ids that changed)"""


async def open_db(path: str) -> aiosqlite.Connection:
    """Open (or create) the view; raises ``sqlite3.DatabaseError`` for a file that is not
    a sound SQLite database (``integrity.quick_check``)."""
    db = await aiosqlite.connect(path, isolation_level=None)
    try:
        await db.execute("PRAGMA journal_mode=WAL")
        await db.execute("PRAGMA synchronous=NORMAL")
        await integrity.quick_check(db)
        await _check_version(db)
        await db.executescript(SCHEMA)
    except BaseException:
        await db.close()
        raise
    return db


async def _check_version(db: aiosqlite.Connection) -> None:
    """Stamp a new (or unversioned, older) view with SCHEMA_VERSION; raise
    ``sqlite3.DatabaseError`` for one of another version (the runner then rebuilds it)."""
    async with db.execute("PRAGMA user_version") as cursor:
        row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    if version == 0:
        await db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    elif version != SCHEMA_VERSION:
        raise sqlite3.DatabaseError(f"schema version {version}, this herd reads {SCHEMA_VERSION}")


async def load(db: aiosqlite.Connection, stream: str) -> tuple[dict[str, NodeView], int]:
    views: dict[str, NodeView] = {}
    async with db.execute("SELECT id, data FROM nodes") as cursor:
        async for node_id, data in cursor:
            views[node_id] = _view_decoder.decode(data)
    async with db.execute("SELECT seq FROM checkpoints WHERE stream = ?", (stream,)) as cursor:
        row = await cursor.fetchone()
    return views, int(row[0]) if row else 0


async def load_table(db: aiosqlite.Connection, table: str,
                     decoder: msgspec.json.Decoder[Any]) -> dict[str, Any]:
    """Every row of one of the view tables (instances, evals, jobs), decoded."""
    async with db.execute(f"SELECT id, data FROM {table}") as cursor:
        return {row[0]: decoder.decode(row[1]) async for row in cursor}


async def load_pool_sizes(db: aiosqlite.Connection) -> dict[str, int]:
    async with db.execute("SELECT id, size FROM pools") as cursor:
        return {row[0]: int(row[1]) async for row in cursor}


def _rows(views: Mapping[str, Any], changed: Iterable[str]) -> tuple[list[Any], list[Any]]:
    upserts, deletes = [], []
    for key in changed:
        view = views.get(key)
        if view is None:
            deletes.append((key,))
        else:
            upserts.append((key, _encoder.encode(view)))
    return upserts, deletes


async def write_batch(db: aiosqlite.Connection, stream: str, views: Mapping[str, NodeView],
                      changed: Iterable[str], seq: int,
                      others: Sequence[TableRows] = (),
                      pool_sizes: dict[str, int] | None = None) -> None:
    """Upsert the changed rows, delete the removed ones, and move the checkpoint: atomically.

    Every row is encoded before the first ``await``: the projector folds on while the
    transaction runs on aiosqlite's thread, and a row committed with checkpoint ``seq``
    must be the row as of ``seq``, not one event later."""
    batch = [(table, *_rows(table_views, table_changed))
             for table, table_views, table_changed in (("nodes", views, changed), *others)]
    await db.execute("BEGIN")
    try:
        for table, upserts, deletes in batch:
            if upserts:
                await db.executemany(
                    f"INSERT INTO {table} (id, data) VALUES (?, ?) "
                    "ON CONFLICT(id) DO UPDATE SET data = excluded.data", upserts)
            if deletes:
                await db.executemany(f"DELETE FROM {table} WHERE id = ?", deletes)
        if pool_sizes is not None:
            await db.executemany(
                "INSERT INTO pools (id, size) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET size = excluded.size", list(pool_sizes.items()))
        await db.execute(
            "INSERT INTO checkpoints (stream, seq) VALUES (?, ?) "
            "ON CONFLICT(stream) DO UPDATE SET seq = excluded.seq", (stream, seq))
        await db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            try:
                await db.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the original error is the one to raise
                pass
        raise
