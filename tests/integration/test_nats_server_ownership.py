"""Which nats-server an EmbeddedNats may stop, and when its servers die with their parent.

Given servers and processes around a store, when an EmbeddedNats starts on it, then only a
nats-server running with that store's config is stopped; and a server launched from the
main thread dies with the process that launched it, one launched from a passing thread
does not die with that thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from herdbook.natsd.embedded import EmbeddedNats, NatsServerError, find_binary, port_in_use
from herdbook.natsd.ownership import leftover_servers
from tests.conftest import alive, free_port, wait_until


def stray(conf: Path) -> subprocess.Popen[bytes]:
    """A nats-server on ``conf`` that no EmbeddedNats of this process started."""
    return subprocess.Popen([find_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def test_a_server_left_on_this_store_is_stopped_and_replaced(tmp_path: Path) -> None:
    port = free_port()
    first = EmbeddedNats(tmp_path / "a" / "nats", port=port)
    first.start()
    first.stop()
    left = stray(first.conf_path)
    try:
        wait_until(lambda: port_in_use("127.0.0.1", port), timeout=10, what="the stray")
        assert leftover_servers(first.conf_path) == [left.pid]
        again = EmbeddedNats(tmp_path / "a" / "nats", port=port)
        again.start()
        try:
            assert left.wait(10) is not None
            assert again.proc is not None and again.proc.poll() is None
        finally:
            again.stop()
    finally:
        if left.poll() is None:
            left.kill()
        left.wait()


def test_servers_of_other_stores_and_other_processes_are_left_alone(tmp_path: Path) -> None:
    other = EmbeddedNats(tmp_path / "b" / "nats", port=free_port())
    other.start()
    sleeper = subprocess.Popen(["sleep", "60"])
    mine = EmbeddedNats(tmp_path / "a" / "nats", port=free_port())
    try:
        assert other.proc is not None
        (mine.store_dir).mkdir(parents=True)
        for pid in (other.proc.pid, sleeper.pid):
            # A stale pid file naming another store's server, or a pid reused by anything.
            (mine.store_dir / "nats-server.pid").write_text(f"{pid}\n")
            assert leftover_servers(mine.conf_path) == []
            mine.start()
            mine.stop()
        assert other.proc.poll() is None and port_in_use("127.0.0.1", other.port)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
        other.stop()


def test_a_port_held_by_another_store_is_refused_not_taken(tmp_path: Path) -> None:
    other = EmbeddedNats(tmp_path / "b" / "nats", port=free_port())
    other.start()
    try:
        mine = EmbeddedNats(tmp_path / "a" / "nats", port=other.port)
        with pytest.raises(NatsServerError, match="is in use"):
            mine.start()
        assert other.proc is not None and other.proc.poll() is None
    finally:
        other.stop()


LAUNCHER = textwrap.dedent("""
    import sys, threading, time
    from herdbook.natsd.embedded import EmbeddedNats
    server = EmbeddedNats(sys.argv[1], port=int(sys.argv[2]))
    if sys.argv[3] == "thread":
        worker = threading.Thread(target=server.start)
        worker.start()
        worker.join()     # the thread that forked is gone
    else:
        server.start()
    print(server.proc.pid, flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_server_dies_with_its_parent_not_with_a_passing_thread(tmp_path: Path,
                                                                  where: str) -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "nats"), str(free_port()), where],
        stdout=subprocess.PIPE)
    assert launcher.stdout is not None
    server = int(launcher.stdout.readline())
    try:
        time.sleep(0.5)
        assert alive(server)       # a passing thread's exit did not take it along
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        if where == "main":
            wait_until(lambda: not alive(server), timeout=10, what="the server to exit")
        else:
            # Launched off the main thread it gets no parent-death signal (the kernel would
            # send it when that thread exits); the next start stops it instead.
            time.sleep(1.0)
            assert alive(server)
            EmbeddedNats(tmp_path / "nats", port=free_port()).prepare()
            wait_until(lambda: not alive(server), timeout=10, what="the leftover stopped")
    finally:
        launcher.stdout.close()
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if alive(server):
            os.kill(server, signal.SIGKILL)
