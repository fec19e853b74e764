"""View snapshots: a control plane that starts without a usable view restores the newest
snapshot it can use from the ``HERD_VIEW_SNAPSHOTS`` object store and replays only the
tail of HERD_EVENTS, instead of folding the whole log (O(tail), not O(log)).

- **Who writes**: the leader only (a leader-only part built afresh per term): one writer
  for the fleet, so replicas neither multiply the uploads nor race each other's cleanup.
  It writes when the view has moved ``view.snapshot_every_events`` events past the last
  snapshot, or ``view.snapshot_every`` has passed and it moved at all; it keeps the
  newest ``view.snapshots_kept``.
- **What a snapshot is**: ``VACUUM INTO`` of the committed view, read in one read
  transaction, so its rows and its checkpoint are those of one commit; zlib-compressed.
  The object's headers name the schema version (``PRAGMA user_version``), the checkpoint
  sequence and the creation time of the stream it was folded from.
- **When one is restored**: only when the local view is missing, empty, or unusable
  (unreadable, or of another schema version; such a file is moved aside first). A good
  local view is never replaced. A snapshot is used only if its schema version is this
  herd's, its stream is the stream there now, its sequence is at most the stream's last
  and the stream still holds the event after it; its copy must decompress, pass SQLite's
  quick_check and carry the sequence its headers name. Otherwise the next older one is
  tried, and with none left the projector folds from sequence 1 as before.

The file work (copying the view, unpacking a snapshot, judging the local view), run in
a thread, is ``snapshot_files.py``; this module decides and talks to the object store.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import ObjectInfo, ObjectMeta, ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore

from herdbook.clock import Clock
from herdbook.config import ViewConfig
from herdbook.control.snapshot_files import (
    Snapshot,
    copy_view,
    local_view,
    unpack,
)
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector import integrity
from herdbook.projector.schema import SCHEMA_VERSION

log = logging.getLogger(__name__)

BUCKET = "HERD_VIEW_SNAPSHOTS"
SNAPSHOTS_STREAM = f"OBJ_{BUCKET}"
"""The object store's stream: no credential but the control plane's may touch it."""
OBJECT_TIMEOUT = 60.0
"""Listing, downloading or uploading one snapshot: longer counts as failed."""
POLL = 1.0
"""How often the writer looks whether a snapshot is due."""

SCHEMA_HEADER = "Herd-Schema-Version"
SEQ_HEADER = "Herd-Seq"
STREAM_HEADER = "Herd-Stream"
CREATED_HEADER = "Herd-Stream-Created"


def headers_of(snap: Snapshot) -> dict[str, list[str]]:
    """As NATS clients write object headers (a list of values per key)."""
    return {SCHEMA_HEADER: [str(snap.schema_version)], SEQ_HEADER: [str(snap.seq)],
            STREAM_HEADER: [snap.stream], CREATED_HEADER: [snap.stream_created]}


def parse(name: str, headers: Mapping[str, Any] | None) -> Snapshot | None:
    """The snapshot an object's headers describe; None for an object that is not one."""
    def header(key: str) -> str:
        value = (headers or {}).get(key, "")
        return str(value[0] if isinstance(value, list) and value else value or "")
    try:
        return Snapshot(name=name, schema_version=int(header(SCHEMA_HEADER)),
                        seq=int(header(SEQ_HEADER)), stream=header(STREAM_HEADER),
                        stream_created=header(CREATED_HEADER))
    except ValueError:
        return None


def due(committed: int, last_seq: int, elapsed: float, config: ViewConfig) -> bool:
    """Whether the writer snapshots now: the view moved ``snapshot_every_events`` past
    the last snapshot, or ``snapshot_every`` passed and it moved at all."""
    if committed <= last_seq:
        return False
    return (committed - last_seq >= config.snapshot_every_events
            or elapsed >= float(config.snapshot_every))


def restorable(snapshots: Sequence[Snapshot], *, stream: str, first_seq: int, last_seq: int,
               created: str) -> list[Snapshot]:
    """The snapshots a view of ``stream`` (holding ``first_seq``..``last_seq``) could start
    from, newest first: this herd's schema version, this stream's history, at most its
    last sequence, and no gap between the snapshot and what the stream still holds."""
    usable = [snap for snap in snapshots
              if snap.schema_version == SCHEMA_VERSION and snap.stream == stream
              and (not snap.stream_created or not created or snap.stream_created == created)
              and 0 < snap.seq <= last_seq and snap.seq + 1 >= first_seq]
    return sorted(usable, key=lambda snap: snap.seq, reverse=True)


def expired(snapshots: Sequence[Snapshot], keep: int) -> list[Snapshot]:
    """All but the newest ``keep`` snapshots of the same schema version and stream as the
    newest; those of other versions or streams, too."""
    ordered = sorted(snapshots, key=lambda snap: snap.seq, reverse=True)
    if not ordered:
        return []
    newest = ordered[0]
    same = [s for s in ordered if (s.schema_version, s.stream) == (newest.schema_version,
                                                                  newest.stream)]
    return [s for s in ordered if s not in same[:keep]]


# --- the object store -------------------------------------------------------------------

async def _bucket(js: JetStreamContext, bucket: str) -> ObjectStore | None:
    try:
        return await js.object_store(bucket)
    except BucketNotFoundError:
        return None


async def create_bucket(js: JetStreamContext, bucket: str = BUCKET,
                        replicas: int = 1) -> ObjectStore:
    """The snapshots' bucket, created (the writer's first snapshot; the streams guard
    when it was deleted from outside)."""
    return await js.create_object_store(bucket, config=ObjectStoreConfig(
        description="herd view snapshots (control/snapshots.py)",
        storage=StorageType.FILE, replicas=replicas))


async def listed(obs: ObjectStore) -> list[Snapshot]:
    """The snapshots in the bucket (objects that are not snapshots are left out)."""
    try:
        infos: list[ObjectInfo] = await asyncio.wait_for(obs.list(ignore_deletes=True),
                                                         OBJECT_TIMEOUT)
    except NotFoundError:
        return []
    snaps = (parse(info.name, info.headers) for info in infos if not info.deleted)
    return [snap for snap in snaps if snap is not None]


async def restore(nc: NATS, db_path: Path, *, stream: str = EVENTS_STREAM,
                  bucket: str = BUCKET) -> Snapshot | None:
    """Before the projector starts: if the local view is missing, empty or unusable,
    put the newest usable snapshot in its place (the projector then folds the tail from
    its checkpoint). Returns the snapshot restored, or None (the projector starts from
    the local view, or from sequence 1). Never raises for what NATS answers: a start
    without a snapshot is slower, not broken."""
    try:
        return await _restore(nc, db_path, stream, bucket)
    except (OSError, integrity.ViewError):
        raise
    except Exception as err:  # noqa: BLE001 - the projector folds from sequence 1 instead
        log.warning("cannot read the view snapshots (%s): folding %s from the local view "
                    "or sequence 1", str(err) or type(err).__name__, stream)
        return None


async def _restore(nc: NATS, db_path: Path, stream: str, bucket: str) -> Snapshot | None:
    why = await asyncio.to_thread(local_view, db_path, stream)
    if why is None:
        return None
    js = nc.jetstream()
    obs = await _bucket(js, bucket)
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return None
    candidates = [] if obs is None else restorable(
        await listed(obs), stream=stream, first_seq=int(info.state.first_seq),
        last_seq=int(info.state.last_seq), created=str(info.created or ""))
    if why not in ("missing", "empty"):
        if not candidates:
            return None     # the projector moves it aside itself and rebuilds
        aside = integrity.move_aside(str(db_path), "unusable")
        log.error("view %s %s: moved it to %s", db_path, why, aside.name)
    if obs is None or not candidates:
        return None
    work = db_path.with_name("view.restore.db")
    for snap in candidates:
        try:
            result = await asyncio.wait_for(obs.get(snap.name), OBJECT_TIMEOUT)
            await asyncio.to_thread(unpack, bytes(result.data or b""), snap, work)
        except Exception as err:  # noqa: BLE001 - any snapshot that fails is skipped
            log.warning("view snapshot %s not used: %s", snap.name, str(err) or type(err).__name__)
            continue
        for suffix in ("-wal", "-shm"):
            Path(f"{db_path}{suffix}").unlink(missing_ok=True)
        os.replace(work, db_path)
        log.info("view restored from snapshot %s: folding %s from sequence %d", snap.name,
                 stream, snap.seq + 1)
        return snap
    log.warning("no view snapshot could be used: folding %s from sequence 1", stream)
    return None


class SnapshotWriter:
    """The leader's snapshot loop (one per term). ``committed``: the projector's
    committed sequence, read to decide whether one is due."""

    def __init__(self, nc: NATS, db_path: Path, committed: Callable[[], int],
                 config: ViewConfig, *, clock: Clock, replicas: int = 1,
                 stream: str = EVENTS_STREAM, bucket: str = BUCKET) -> None:
        self.nc = nc
        self.db_path = db_path
        self.committed = committed
        self.config = config
        self.clock = clock
        self.replicas = replicas
        self.stream = stream
        self.bucket = bucket
        self.last_seq = 0
        self.last_at = 0.0
        self.written = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._obs: ObjectStore | None = None

    async def start(self) -> None:
        self.last_at = self.clock.monotonic()
        self._stopping = False
        self._task = asyncio.create_task(self._loop(), name="view-snapshots")

    async def stop(self) -> None:
        """Cancel the loop and wait for it. The flag too: a cancel landing inside a NATS
        call can come back as an ordinary error (or be swallowed by ``wait_for`` on 3.11),
        and the loop would poll on for ever (a failed start once hung on it)."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _store(self) -> ObjectStore:
        """The bucket (created if missing); the first time, where its newest snapshot is."""
        if self._obs is not None:
            return self._obs
        js = self.nc.jetstream()
        obs = await _bucket(js, self.bucket)
        if obs is None:
            obs = await create_bucket(js, self.bucket, self.replicas)
        mine = [s.seq for s in await listed(obs)
                if s.schema_version == SCHEMA_VERSION and s.stream == self.stream]
        self.last_seq = max(self.last_seq, *mine, 0)
        self._obs = obs
        return obs

    async def _loop(self) -> None:
        failing = ""
        while not self._stopping:
            try:
                await self._store()
                await asyncio.sleep(POLL)
                elapsed = self.clock.monotonic() - self.last_at
                if not due(self.committed(), self.last_seq, elapsed, self.config):
                    continue
                await self.snapshot()
            except Exception as err:  # noqa: BLE001 - one line, tried again at the next poll
                if self._stopping:
                    return
                if str(err) != failing:
                    failing = str(err)
                    log.warning("view snapshot failed: %s", failing or type(err).__name__)
                self.last_at = self.clock.monotonic()   # not again at every poll
                await asyncio.sleep(POLL)
            else:
                failing = ""

    async def snapshot(self) -> Snapshot | None:
        """Copy the view as committed now into the bucket, then drop the oldest beyond
        ``snapshots_kept``. None if the view is empty or its sequence has a snapshot."""
        obs = await self._store()
        work = self.db_path.with_name("view.snapshot.db")
        blob, snap = await asyncio.to_thread(copy_view, self.db_path, work, self.stream)
        if snap.seq == 0 or snap.seq == self.last_seq:
            return None
        await asyncio.wait_for(obs.put(snap.name, blob, meta=ObjectMeta(
            name=snap.name, description=f"view of {self.stream} at sequence {snap.seq}",
            headers=headers_of(snap))), OBJECT_TIMEOUT)
        self.last_seq, self.last_at = snap.seq, self.clock.monotonic()
        self.written += 1
        log.info("view snapshot %s written (%d bytes)", snap.name, len(blob))
        await self.prune(obs)
        return snap

    async def prune(self, obs: ObjectStore) -> None:
        """Delete the snapshots beyond the newest ``snapshots_kept``, and their delete
        markers too, so the bucket's metadata does not grow with every snapshot."""
        js = self.nc.jetstream()
        for snap in expired(await listed(obs), self.config.snapshots_kept):
            try:
                await obs.delete(snap.name)
            except NotFoundError:
                pass    # another leader's term pruned it
            meta = base64.urlsafe_b64encode(snap.name.encode()).decode()
            await js.purge_stream(f"OBJ_{self.bucket}", subject=f"$O.{self.bucket}.M.{meta}")
