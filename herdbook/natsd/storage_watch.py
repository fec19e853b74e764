"""The embedded nats-server's disk: a full one is said aloud, and recovered from without
restarting ``herd up``.

What nats-server 2.15 does when its disk fills (measured on a small tmpfs): the write
that hits ENOSPC gets no answer at all (the client times out), and the stream keeps that
"critical write error" until the server restarts, even after space is freed; the
leader lease's KV stream breaks the same way. (A JetStream limit reached first,
``max_file_store``, is answered with error 10023 instead, which ``EventStore`` reports.)

So the control plane watches the free space of the store's filesystem every
``interval`` seconds:

- below ``min_free``: appends fail at once with "NATS storage full: ..."
  (``EventStore.storage_full``), and one ERROR line says so;
- space back after that: the embedded server is restarted to clear its write errors,
  with one WARNING line; clients reconnect, the lease is taken again and the feeds
  resume from their last sequence.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger(__name__)

MIN_FREE = 4 * 1024 * 1024
"""Bytes: less free space than this on the NATS store's filesystem counts as full (a
message block and its index need a few; nats-server has no answer for a failed write)."""


def free_bytes(path: Path) -> int:
    """Space an unprivileged writer may still use on ``path``'s filesystem."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class StorageWatch:
    def __init__(self, store_dir: Path, restart: Callable[[], Awaitable[None]], *,
                 min_free: int = MIN_FREE, interval: float = 1.0,
                 free: Callable[[Path], int] = free_bytes) -> None:
        """``restart``: restart the nats-server whose store is ``store_dir``."""
        self.store_dir = store_dir
        self.restart = restart
        self.min_free = min_free
        self.interval = interval
        self.free = free
        self.full_since_restart = False
        """The disk was full since the server last started: it needs a restart."""
        self.restarts = 0
        self._task: asyncio.Task[None] | None = None

    def full(self) -> str | None:
        """Why the NATS store cannot take a write now (one line), or None."""
        free = self._free()
        if free is not None and free < self.min_free:
            self._filled(free)
            return (f"NATS storage full: {human(free)} free on {self.store_dir}; appends "
                    "resume once space is freed")
        if self.full_since_restart:
            return (f"NATS storage full: space is back on {self.store_dir}, nats-server is "
                    "being restarted to clear its write errors")
        return None

    def _free(self) -> int | None:
        try:
            return self.free(self.store_dir)
        except OSError:
            return None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="storage-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - the next round tries again
                log.warning("storage check failed: %s", err)

    async def check(self) -> None:
        free = self._free()
        if free is None:
            return
        if free < self.min_free:
            self._filled(free)
            return
        if self.full_since_restart:
            log.warning("NATS storage has space again (%s free on %s): restarting "
                        "nats-server to clear its write errors", human(free), self.store_dir)
            await self.restart()
            self.restarts += 1
            self.full_since_restart = False

    def _filled(self, free: int) -> None:
        if not self.full_since_restart:
            self.full_since_restart = True
            log.error("NATS storage full: %s free on %s; appends fail until space is freed",
                      human(free), self.store_dir)
