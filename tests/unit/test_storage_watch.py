"""The storage watch on a fake disk: full is said once and refuses appends at once; space
back restarts nats-server once, and appends are refused until that restart is done."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from herdbook.events.node import NodeDeclared
from herdbook.events.store import EventStore, StorageFullError
from herdbook.natsd.storage_watch import MIN_FREE, StorageWatch


class FakeDisk:
    def __init__(self, free: int) -> None:
        self.bytes_free = free

    def free(self, path: Path) -> int:
        return self.bytes_free


async def test_full_then_freed(caplog: pytest.LogCaptureFixture) -> None:
    disk = FakeDisk(1 << 30)
    restarted = asyncio.Event()
    release = asyncio.Event()

    async def restart() -> None:
        restarted.set()
        await release.wait()

    watch = StorageWatch(Path("/nats"), restart, free=disk.free)
    store = EventStore(NATS(), storage_full=watch.full)   # never connected
    assert watch.full() is None

    # given: the disk fills
    disk.bytes_free = MIN_FREE - 1
    with caplog.at_level(logging.WARNING):
        # then: an append is refused before it reaches NATS (there is none here)
        with pytest.raises(StorageFullError, match=r"^NATS storage full: 4\.0 MiB free on /nats"):
            await store.append(NodeDeclared(node_id="n"))
        await watch.check()
        await watch.check()
        # when: space comes back, the restart runs; appends wait for it to finish
        disk.bytes_free = 1 << 30
        checking = asyncio.create_task(watch.check())
        await asyncio.wait_for(restarted.wait(), 1)
        assert watch.full() is not None and "being restarted" in str(watch.full())
        release.set()
        await checking
    assert watch.full() is None and watch.restarts == 1
    await watch.check()
    assert watch.restarts == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("NATS storage full"), errors
