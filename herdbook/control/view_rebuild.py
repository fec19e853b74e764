"""The view rebuilt from the stream (``herd view rebuild``, or a view found ahead of what
the server kept), in a fresh database swapped in once it is complete."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from herdbook.config import ProjectorConfig
from herdbook.events.store import stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.runner import ProjectorRunner

log = logging.getLogger(__name__)


class ViewRebuild:
    def __init__(self, nc: NATS, projector: ProjectorRunner, db: Path,
                 config: ProjectorConfig) -> None:
        self.nc = nc
        self.projector = projector
        self.db = db
        self.config = config

    async def __call__(self) -> dict[str, Any]:
        """Replay HERD_EVENTS from sequence 1 into a fresh database, then swap it in
        under the running projector (stopped for the swap, started again on it)."""
        started = time.monotonic()
        tmp = self.db.with_name("view.rebuild.db")
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
        fresh = ProjectorRunner(self.nc, str(tmp), batch_size=self.config.batch_size,
                                batch_interval=float(self.config.batch_interval))
        fresh.backlog_connect = self.projector.backlog_connect
        await fresh.start()
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if last:
            await fresh.wait_applied(last, timeout=600.0)
        await fresh.stop()
        old = self.projector
        await old.stop()
        os.replace(tmp, self.db)
        for suffix in ("-wal", "-shm"):
            Path(f"{self.db}{suffix}").unlink(missing_ok=True)
        await old.start()
        seconds = time.monotonic() - started
        return {"events": last, "nodes": len(old.nodes), "seconds": round(seconds, 3),
                "events_per_second": round(last / seconds) if seconds else None}

    async def if_ahead(self) -> None:
        """After the embedded server restarted: a write acknowledged just before the disk
        filled may not have reached it, and a view that folded it would take the next
        event given that sequence for one it has. Such a view is rebuilt."""
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if self.projector.folded_seq > last:
            log.error("the view is at sequence %d but %s ends at %d after the restart: "
                      "rebuilding it from sequence 1", self.projector.folded_seq,
                      EVENTS_STREAM, last)
            await self()
