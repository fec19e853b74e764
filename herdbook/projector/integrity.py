"""Whether a view file can be trusted: readable, and folded from the stream there now.

The view is disposable (DESIGN §9): one that cannot be read, or whose checkpoint belongs
to another history of the stream, is moved aside and folded again from sequence 1. What
is not the view's fault (a file that cannot be opened at all, a full or failing disk) is
a ``ViewError`` instead: rebuilding would not help, the operator has to act.

A view belongs to another history when
- its checkpoint is beyond the stream's last sequence (the NATS store was wiped, or the
  stream deleted and created again, and the old view kept): every new event would be
  taken for one already folded and skipped;
- or the stream's ``created`` time is not the one recorded with the checkpoint, and the
  stream does not say it continues an earlier one. The streams guard recreates a deleted
  stream with ``first_seq`` after what was read: a continuation, whose lost events no
  rebuild could bring back, so that view is kept.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import aiosqlite
import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from herdbook.events.subjects import printable

log = logging.getLogger(__name__)

CORRUPT_ERRORS = (sqlite3.DatabaseError, msgspec.DecodeError)
"""What reading a damaged view raises (``ValidationError`` is a ``DecodeError``)."""

NOT_THE_VIEWS_FAULT = ("unable to open database file", "database is locked",
                       "database or disk is full", "disk i/o error", "readonly database")


class ViewError(RuntimeError):
    """The view file cannot be used and rebuilding it would not help."""


def corrupt_reason(path: str, err: Exception) -> str:
    """Why the view at ``path`` counts as corrupt; raises ``ViewError`` if the error is
    about the disk or the file's access rather than the view's content."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, sqlite3.DatabaseError) and any(
            cause in text.lower() for cause in NOT_THE_VIEWS_FAULT):
        raise ViewError(f"cannot use the view {path}: {text}") from err
    return f"cannot be read ({printable(text, 120)})"


async def quick_check(db: aiosqlite.Connection) -> None:
    """Raise ``sqlite3.DatabaseError`` unless SQLite's quick_check finds the file sound."""
    async with db.execute("PRAGMA quick_check") as cursor:
        rows = [str(row[0]) for row in await cursor.fetchall()]
    if rows != ["ok"]:
        raise sqlite3.DatabaseError(f"integrity check: {'; '.join(rows[:3])}")


async def disagreement(js: JetStreamContext, stream: str, db: aiosqlite.Connection,
                       checkpoint: int,
                       on_continued: Callable[[int], None] | None = None) -> str | None:
    """Why the view checkpointed at ``checkpoint`` is not a view of ``stream`` as it is
    now, or None; records the stream's identity for the next start when it is.
    ``on_continued(first_seq)``: the view is kept for a stream created again from
    ``first_seq`` (its versions before it name nothing any more)."""
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return None   # nothing to compare with; the feed reports the missing stream
    last, created = int(info.state.last_seq), str(info.created or "")
    recorded = await recorded_created(db, stream)
    if checkpoint > last:
        return (f"is at sequence {checkpoint} but {stream} ends at {last} (its store was "
                "wiped or the stream created again)")
    continues = int(info.config.first_seq or 0) > 1
    if recorded is not None and created and recorded != created:
        if not continues:
            return (f"was folded from another {stream} (created {recorded}; the one there "
                    f"now was created {created})")
        log.warning("%s was created again from sequence %d (created %s): the view keeps "
                    "what it folded before", stream, info.config.first_seq, created)
        if on_continued is not None:
            on_continued(int(info.config.first_seq or 1))
    if created and recorded != created:
        await record_created(db, stream, created)
    return None


async def record_created(db: aiosqlite.Connection, stream: str, created: str) -> None:
    """Record the ``created`` time of the stream the view folds (committed at once)."""
    await db.execute("INSERT INTO stream_identity (stream, created) VALUES (?, ?) "
                     "ON CONFLICT(stream) DO UPDATE SET created = excluded.created",
                     (stream, created))


async def recorded_created(db: aiosqlite.Connection, stream: str) -> str | None:
    async with db.execute("SELECT created FROM stream_identity WHERE stream = ?",
                          (stream,)) as cursor:
        row = await cursor.fetchone()
    return str(row[0]) if row else None


def checkpoint_of(path: Path, stream: str) -> int:
    """The sequence through which the view file at ``path`` folded ``stream``, read before
    anything opens it (the start creates a missing stream after it); 0 for no view, or
    one that cannot be read (folded again from sequence 1 anyway)."""
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1.0)
        try:
            row = db.execute("SELECT seq FROM checkpoints WHERE stream = ?",
                             (stream,)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return 0
    return int(row[0]) if row and isinstance(row[0], int) else 0


def move_aside(path: str, kind: str) -> Path:
    """Rename the view and its WAL files to ``<path>.<kind>-<UTC time>``, kept for a look."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = Path(f"{path}.{kind}-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = Path(f"{path}.{kind}-{stamp}-{n}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            source.rename(f"{aside}{suffix}")
    return aside
