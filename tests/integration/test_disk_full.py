"""Disk full is loud and recoverable: appends answer "NATS storage full" at once (the CLI
exits 4 with one line), and once space is freed the control plane restarts its embedded
nats-server (whose streams keep a write error until then), takes the leader lease back
and folds new events, without a restart of the control plane."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from herdbook.cli.client import EXIT_STORAGE_FULL
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.node import NodeDeclared
from herdbook.events.store import EventStore, StorageFullError
from herdbook.nats_connection import quiet_errors
from herdbook.natsd.embedded import launch, terminate, wait_listening
from tests.conftest import free_port, herd
from tests.integration.test_agent_and_control import eventually


def fill(path: Path) -> None:
    """Write zeros into ``path`` until the filesystem is full."""
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as filler:   # unbuffered: close has nothing to flush
        try:
            while True:
                filler.write(chunk)
        except OSError:
            pass
        try:    # the last few pages
            while filler.write(b"\0" * 512):
                pass
        except OSError:
            pass


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs: a disk that can be filled in a moment."""
    if sys.platform != "linux" or os.geteuid() != 0:
        reason = (f"mounting a tmpfs needs root on Linux (running as uid {os.geteuid()} on "
                  f"{sys.platform}); the disk-full test did not run")
        print(reason)
        pytest.skip(reason)
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        reason = f"cannot mount a tmpfs: {mounted.stderr.strip()}"
        print(reason)
        pytest.skip(reason)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


async def squeeze(nc: Any, until: Callable[[], bool], timeout: float = 20.0) -> None:
    """Write into HERD_EVENTS and the lease bucket past the disk's last free bytes (as
    a writer that does not know would) until ``until()``."""
    js = nc.jetstream()
    blind = EventStore(nc, timeout=0.5, attempts=1)
    deadline = time.monotonic() + timeout
    i = 0
    while not until():
        assert time.monotonic() < deadline, "the disk never refused a write"
        with contextlib.suppress(Exception):
            await blind.append(NodeDeclared(node_id=f"squeezed-{i}", reason="x" * 6000))
        with contextlib.suppress(Exception):
            await js.publish("$KV.herd_leases.filler", b"x" * 6000, timeout=0.5)
        i += 1


async def api(nc: Any, route: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(f"herd.api.v1.{route}", json.dumps(body).encode(), timeout=10)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def test_disk_full_is_one_line_with_exit_4_and_everything_resumes_when_freed(
        small_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    # given: a control plane whose data dir (view and NATS store) is on a small disk
    config = parse_config(f"nats: {{port: {free_port()}}}\ndata_dir: '{small_disk / 'd'}'\n"
                          "node_id: cp-disk\nleader_ttl: 3s\n"
                          "lifecycle: {heartbeat_timeout: 10s}\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    nc = await nats.connect(plane.url, error_cb=quiet_errors)
    try:
        assert plane.lease is not None and plane.lease.leader
        assert (await api(nc, "node.add", {"id": "before"}))["ok"]

        # when: the disk fills up
        with caplog.at_level(logging.WARNING):
            await asyncio.to_thread(fill, small_disk / "filler")
            # and a writer that does not know fills the streams' last pages: JetStream's
            # writes fail, the lease cannot be renewed, the leader steps down
            await squeeze(nc, lambda: plane.lease is not None and not plane.lease.leader)

            # then: an append is refused at once, one line, exit code 4
            full = await asyncio.to_thread(herd, "node", "add", "during", server=plane.url)
            assert full.returncode == EXIT_STORAGE_FULL, full
            assert full.stderr.startswith("Error: NATS storage full"), full.stderr
            assert len(full.stderr.strip().splitlines()) == 1, full.stderr
            assert "Traceback" not in full.stderr

            # when: space is freed
            (small_disk / "filler").unlink()

            # then: nats-server is restarted once, appends land, the leader is back and the
            # view folds the new event
            async def added() -> bool:
                return bool((await api(nc, "node.add", {"id": "after"}))["ok"])

            await eventually(added, timeout=30)
            assert plane.storage is not None and plane.storage.restarts == 1

            async def leads() -> bool:
                return plane.lease is not None and plane.lease.leader

            await eventually(leads, timeout=15)
            items = (await api(nc, "node.list", {}))["result"]["items"]
            assert {"before", "after"} <= {n["id"] for n in items}
            assert "during" not in {n["id"] for n in items}
            status = (await api(nc, "status", {}))["result"]
            assert status["projector_lag"] == 0 and status["leader"], status
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR
                and "NATS storage full" in r.getMessage()]
        assert len(said) == 1, said
        assert not [r for r in caplog.records if r.exc_info and r.name.startswith("herdbook")]
    finally:
        await nc.close()
        await plane.stop()


async def test_jetstream_out_of_its_storage_limit_is_storage_full(tmp_path: Path) -> None:
    """nats-server's own limit (max_file_store) answers 10023 "insufficient resources":
    the store says storage full, whoever runs the server. No root needed."""
    port = free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\n'
                    f'jetstream {{ store_dir: "{tmp_path / "js"}", max_file_store: 256KB }}\n')
    proc = launch(conf, tmp_path / "nats.log")
    try:
        await asyncio.to_thread(wait_listening, proc, "127.0.0.1", port, tmp_path / "nats.log",
                                "nats-server", 15.0)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        try:
            await ensure_streams(nc, 1, 3600.0)
            store = EventStore(nc, timeout=2.0)
            with pytest.raises(StorageFullError, match=r"^NATS storage full: .*10023"):
                for i in range(1000):
                    await store.append(NodeDeclared(node_id=f"n{i}", reason="x" * 2000))
        finally:
            await nc.close()
    finally:
        await asyncio.to_thread(terminate, proc)
