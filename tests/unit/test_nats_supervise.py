"""EmbeddedNats.supervise: given a server that dies at given times, when it is watched,
then it is restarted up to 3 times within 60 s and the 4th death within 60 s gives up
with one line; deaths further apart are restarted for ever."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from herdbook.natsd.embedded import EmbeddedNats, NatsServerError


class FakeProc:
    def __init__(self) -> None:
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class FakeServer(EmbeddedNats):
    """Dies when told; a restart is a new FakeProc, or a NatsServerError when told."""

    def __init__(self, tmp: Path, clock: list[float]) -> None:
        super().__init__(tmp)
        self.clock = clock
        self.starts = 0
        self.fail_next_start = False
        self.proc = FakeProc()  # type: ignore[assignment]

    async def start_async(self, timeout: float = 15.0) -> None:
        self.starts += 1
        if self.fail_next_start:
            self.fail_next_start = False
            self.proc = None
            raise NatsServerError("port 4222 on 127.0.0.1 is in use")
        self.proc = FakeProc()  # type: ignore[assignment]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.returncode = -9


async def watch(server: FakeServer, deaths: list[float]) -> str | None:
    """Kill the server at each time of ``deaths`` (seconds on the fake clock); return
    what supervise returned, or None if it still watches after the last one."""
    task = asyncio.create_task(server.supervise(interval=0.001, clock=lambda: server.clock[0]))
    for when in deaths:
        server.clock[0] = when
        server.kill()
        before = server.starts
        for _ in range(1000):     # until it is restarted and running, or gave up
            await asyncio.sleep(0.001)
            if task.done() or (server.starts > before and server.proc is not None
                               and server.proc.poll() is None):
                break
    if task.done():
        return task.result()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return None


async def test_three_restarts_within_the_window_then_one_line(tmp_path: Path) -> None:
    server = FakeServer(tmp_path, [0.0])
    result = await watch(server, [1.0, 2.0, 3.0, 4.0])
    assert server.starts == 3
    assert result is not None and "\n" not in result
    assert result.startswith("embedded nats-server died 4 times within 60s; giving up")


async def test_deaths_further_apart_than_the_window_are_restarted(tmp_path: Path) -> None:
    server = FakeServer(tmp_path, [0.0])
    assert await watch(server, [1.0, 2.0, 3.0, 70.0, 71.0, 72.0, 140.0]) is None
    assert server.starts == 7


async def test_a_restart_that_fails_counts_as_a_death(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    server = FakeServer(tmp_path, [0.0])
    server.fail_next_start = True
    result = await watch(server, [1.0, 2.0, 3.0])
    assert result is not None and "died 4 times" in result
    assert server.starts == 3
    assert "did not restart: port 4222 on 127.0.0.1 is in use" in caplog.text
