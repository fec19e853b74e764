"""SQLite view schema and the thin layer that reads and writes it.

The stream sequence checkpoint is written in the same transaction as the view rows
(``write_batch``), so a kill at any moment leaves rows and checkpoint consistent.
"""

from __future__ import annotations

from collections.abc import Iterable

import aiosqlite
import msgspec

from herdbook.projector.node_view import NodeView

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    id   TEXT PRIMARY KEY,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
    stream TEXT PRIMARY KEY,
    seq    INTEGER NOT NULL
);
"""

_encoder = msgspec.json.Encoder()
_view_decoder = msgspec.json.Decoder(NodeView)


async def open_db(path: str) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    await db.execute("PRAGMA journal_mode=WAL")
    await db.execute("PRAGMA synchronous=NORMAL")
    await db.executescript(SCHEMA)
    return db


async def load(db: aiosqlite.Connection, stream: str) -> tuple[dict[str, NodeView], int]:
    views: dict[str, NodeView] = {}
    async with db.execute("SELECT id, data FROM nodes") as cursor:
        async for node_id, data in cursor:
            views[node_id] = _view_decoder.decode(data)
    async with db.execute("SELECT seq FROM checkpoints WHERE stream = ?", (stream,)) as cursor:
        row = await cursor.fetchone()
    return views, int(row[0]) if row else 0


async def write_batch(db: aiosqlite.Connection, stream: str, views: dict[str, NodeView],
                      changed: Iterable[str], seq: int) -> None:
    """Upsert the changed rows, delete the removed ones, and move the checkpoint: atomically."""
    upserts = []
    deletes = []
    for node_id in changed:
        view = views.get(node_id)
        if view is None:
            deletes.append((node_id,))
        else:
            upserts.append((node_id, _encoder.encode(view)))
    await db.execute("BEGIN")
    try:
        if upserts:
            await db.executemany(
                "INSERT INTO nodes (id, data) VALUES (?, ?) "
                "ON CONFLICT(id) DO UPDATE SET data = excluded.data", upserts)
        if deletes:
            await db.executemany("DELETE FROM nodes WHERE id = ?", deletes)
        await db.execute(
            "INSERT INTO checkpoints (stream, seq) VALUES (?, ?) "
            "ON CONFLICT(stream) DO UPDATE SET seq = excluded.seq", (stream, seq))
        await db.execute("COMMIT")
    except BaseException:
        await db.execute("ROLLBACK")
        raise
