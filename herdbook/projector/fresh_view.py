"""A rebuild from sequence 1 goes into a fresh file, renamed over the view once complete.

While the projector folds a stream from sequence 1 (a new view, or one moved aside as
corrupt or stale), nothing it commits is worth keeping through a crash: a crashed
rebuild starts again from sequence 1 anyway. So it folds into ``<view>.rebuild`` with
the rollback journal in memory and no fsyncs, commits only for someone waiting for an
event (``wait_applied``) and at the end, and ``install`` then syncs the file and renames
it over the view in one step. A crash before the rename leaves the view as it was (empty,
checkpoint 0): the next start rebuilds again and ``open_fresh`` deletes the leftover.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiosqlite

from herdbook.projector import schema

SUFFIX = ".rebuild"


def fresh_path(path: str) -> str:
    return path + SUFFIX


def _remove(path: str) -> None:
    for suffix in ("", "-journal", "-wal", "-shm"):
        Path(path + suffix).unlink(missing_ok=True)


async def open_fresh(path: str, *, empty: bool = True) -> aiosqlite.Connection:
    """An empty view beside the one at ``path``, to rebuild into (any leftover of a
    rebuild that crashed is deleted first); with ``empty=False``, that file as it is
    (an ``install`` that failed, tried again)."""
    fresh = fresh_path(path)
    if empty:
        await asyncio.to_thread(_remove, fresh)
    db = await schema.open_db(fresh)
    try:
        # No journal file and no fsync: the file counts only once install() renamed it.
        await db.execute("PRAGMA journal_mode=MEMORY")
        await db.execute("PRAGMA synchronous=OFF")
    except BaseException:
        await db.close()
        raise
    return db


async def install(db: aiosqlite.Connection, path: str) -> None:
    """Close ``db`` (the fresh view of ``path``, everything committed), sync it to disk and
    rename it over ``path`` atomically; the old view's WAL files go first."""
    await db.close()
    await asyncio.to_thread(_install_file, fresh_path(path), path)


def _install_file(fresh: str, path: str) -> None:
    with open(fresh, "rb") as file:
        os.fsync(file.fileno())
    for suffix in ("-wal", "-shm"):
        # The old view was closed cleanly (its WAL checkpointed): nothing of it is lost, and
        # a stale WAL must never be read as the new file's.
        Path(path + suffix).unlink(missing_ok=True)
    os.replace(fresh, path)
    try:   # the rename on disk: lost to a power cut only, and then the rebuild restarts
        directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:
        pass
