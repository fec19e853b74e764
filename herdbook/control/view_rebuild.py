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
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.refused import CommandRefused

log = logging.getLogger(__name__)


class ViewRebuild:
    def __init__(self, nc: NATS, projector: ProjectorRunner, db: Path,
                 config: ProjectorConfig) -> None:
        self.nc = nc
        self.projector = projector
        self.db = db
        self.config = config

    async def __call__(self, *, after_loss: bool = False) -> dict[str, Any]:
        """Replay HERD_EVENTS from sequence 1 into a fresh database, then swap it in
        under the running projector (stopped for the swap, started again on it).
        Refused on a stream created again after a loss (``streams_guard``), unless
        ``after_loss``: a view folded from it forgets what only the old view holds."""
        if not after_loss:
            await self._refuse_after_a_loss()
        started = time.monotonic()
        tmp = self.db.with_name("view.rebuild.db")
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
        fresh = ProjectorRunner(self.nc, str(tmp), batch_size=self.config.batch_size,
                                batch_interval=float(self.config.batch_interval))
        await fresh.start()
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        # catch_up, not a wait for ``last``: a stream created again empty says a last
        # sequence no message holds, and the wait would only end at its timeout.
        await fresh.catch_up(timeout=600.0)
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

    async def _refuse_after_a_loss(self) -> None:
        info = await self.nc.jetstream().stream_info(EVENTS_STREAM)
        first = int(info.config.first_seq or 0)
        if first > 1:
            raise CommandRefused(
                f"{EVENTS_STREAM} was created again from sequence {first} after its earlier "
                "events were lost: a view rebuilt from it would forget the nodes, jobs and "
                "allocations only this view still holds; to start from an empty fleet "
                f"anyway, stop herd up, move {self.db}* aside and start it again")

    async def if_ahead(self) -> None:
        """After the embedded server restarted: a write acknowledged just before the disk
        filled may not have reached it, and a view that folded it would take the next
        event given that sequence for one it has. Such a view is rebuilt."""
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if self.projector.folded_seq > last:
            log.error("the view is at sequence %d but %s ends at %d after the restart: "
                      "rebuilding it from sequence 1", self.projector.folded_seq,
                      EVENTS_STREAM, last)
            await self(after_loss=True)
