"""What a view snapshot is (its name, schema version, checkpoint and stream) and the file
work on one (``snapshots.py`` runs each in a thread): a compressed, consistent copy of
the view, a snapshot unpacked and checked, and whether the local view is usable or must
be restored."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import msgspec

from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector import integrity
from herdbook.projector.schema import SCHEMA_VERSION


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    schema_version: int
    seq: int
    stream: str = EVENTS_STREAM
    stream_created: str = ""


def snapshot_name(schema_version: int, seq: int) -> str:
    return f"view-v{schema_version}-{seq:012d}"


def _read_state(db: sqlite3.Connection, stream: str) -> tuple[int, int, str]:
    """(schema version, checkpoint, recorded stream creation) of an open view."""
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    seq, created = 0, ""
    if "checkpoints" in tables:
        row = db.execute("SELECT seq FROM checkpoints WHERE stream = ?", (stream,)).fetchone()
        seq = int(row[0]) if row else 0
    if "stream_identity" in tables:
        row = db.execute("SELECT created FROM stream_identity WHERE stream = ?",
                         (stream,)).fetchone()
        created = str(row[0]) if row else ""
    return version, seq, created


def copy_view(db_path: Path, work: Path, stream: str) -> tuple[bytes, Snapshot]:
    """A compressed, consistent copy of the view at ``db_path`` (``work`` is scratch)."""
    work.unlink(missing_ok=True)
    try:
        source = sqlite3.connect(db_path)
        try:
            source.execute("VACUUM INTO ?", (str(work),))
        finally:
            source.close()
        copy = sqlite3.connect(work)
        try:
            version, seq, created = _read_state(copy, stream)
        finally:
            copy.close()
        blob = zlib.compress(work.read_bytes())
    finally:
        work.unlink(missing_ok=True)
    return blob, Snapshot(name=snapshot_name(version, seq), schema_version=version, seq=seq,
                          stream=stream, stream_created=created)


def unpack(blob: bytes, snap: Snapshot, out: Path) -> None:
    """Write the view of ``blob`` to ``out``; raise ``ValueError`` unless it is a sound
    view of the schema version and sequence ``snap`` names."""
    out.unlink(missing_ok=True)
    try:
        out.write_bytes(zlib.decompress(blob))
    except zlib.error as err:
        raise ValueError(f"does not decompress ({err})") from None
    try:
        db = sqlite3.connect(out)
        try:
            rows = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
            if rows != ["ok"]:
                raise ValueError(f"integrity check: {'; '.join(rows[:3])}")
            version, seq, _ = _read_state(db, snap.stream)
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        out.unlink(missing_ok=True)
        raise ValueError(f"not a view ({err})") from None
    except ValueError:
        out.unlink(missing_ok=True)
        raise
    if (version, seq) != (snap.schema_version, snap.seq):
        out.unlink(missing_ok=True)
        raise ValueError(f"holds schema version {version} at sequence {seq}, its headers "
                         f"say {snap.schema_version} at {snap.seq}")


def local_view(db_path: Path, stream: str) -> str | None:
    """None if the view at ``db_path`` is usable and not empty; else why it is not:
    "missing", "empty", or a reason to move it aside. Errors that are not the file's
    content (``integrity.NOT_THE_VIEWS_FAULT``) count as usable: the projector reports
    them, restoring would not help."""
    if not db_path.exists():
        return "missing"
    try:
        db = sqlite3.connect(db_path)
        try:
            rows = [str(row[0]) for row in db.execute("PRAGMA quick_check").fetchall()]
            if rows != ["ok"]:
                return f"cannot be read (integrity check: {'; '.join(rows[:3])})"
            version, seq, _ = _read_state(db, stream)
        finally:
            db.close()
    except sqlite3.DatabaseError as err:
        if any(cause in str(err).lower() for cause in integrity.NOT_THE_VIEWS_FAULT):
            return None
        return f"cannot be read ({err})"
    if version not in (0, SCHEMA_VERSION):
        return f"is of schema version {version}, this herd reads {SCHEMA_VERSION}"
    return "empty" if seq == 0 else None
