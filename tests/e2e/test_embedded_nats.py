"""The embedded nats-server of a real `herd up`: it dies with `herd up` (SIGKILL included),
the next `herd up` of the same data dir starts over it, and `herd up` restarts it when it
dies, a few times, then exits non-zero with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import alive, free_port, herd, wait_until

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 8s
  grace_period:
    standard: 8s
"""
AGENTS = ("gpu-1", "gpu-2")


class Plane:
    """`herd up` in its own process group (as systemd runs it), and agents."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.data_dir = tmp / "data"
        self.up_proc: subprocess.Popen[bytes] | None = None
        self.agents: list[subprocess.Popen[bytes]] = []
        (tmp / "herd.yaml").write_text(CONFIG)

    def up(self, name: str = "up") -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            self.up_proc = subprocess.Popen(
                [sys.executable, "-m", "herdbook.cli", "up", "--config",
                 str(self.tmp / "herd.yaml"), "--data-dir", str(self.data_dir), "--nats-port",
                 str(self.port), "--node-id", "cp-1"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self.up_proc

    def answers(self) -> bool:
        return herd("status", server=self.url, timeout=10).returncode == 0

    def agent(self, node_id: str) -> None:
        with open(self.tmp / f"{node_id}.log", "ab") as log:
            self.agents.append(subprocess.Popen(
                [sys.executable, "-m", "herdbook.cli", "agent", "--server", self.url,
                 "--node-id", node_id, "--state-dir", str(self.tmp / node_id),
                 "--fake-gpus", "1", "--heartbeat-interval", "0.5"],
                stdout=log, stderr=subprocess.STDOUT))

    def nodes(self) -> dict[str, dict[str, object]]:
        out = herd("node", "list", "-o", "json", server=self.url, timeout=10)
        if out.returncode != 0:
            return {}
        return {n["id"]: n for n in json.loads(out.stdout)}

    def nats_pid(self) -> int | None:
        try:
            return int((self.data_dir / "nats" / "nats-server.pid").read_text())
        except (OSError, ValueError):
            return None

    def log(self, name: str = "up") -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in [*self.agents, self.up_proc]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.agents, self.up_proc]:
            if proc is None:
                continue
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    p = Plane(tmp_path)
    try:
        yield p
    finally:
        p.stop()
        for pid in running_with(str(p.data_dir)):    # never leave one behind
            os.kill(pid, signal.SIGKILL)


def running_with(text: str) -> list[int]:
    """Live processes whose command line mentions ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def liveness_events(url: str) -> list[str]:
    out = herd("events", "tail", "-o", "json", "--subject", "herd.node.>", server=url,
               check=True)
    subjects = [json.loads(line)["subject"] for line in out.stdout.splitlines()]
    return [s for s in subjects if s.endswith((".degraded", ".down"))]


def test_sigkill_of_herd_up_strands_no_server_and_the_next_start_takes_over(
        plane: Plane) -> None:
    first = plane.up()
    wait_until(plane.answers, timeout=30, what="herd up to answer")
    for node_id in AGENTS:
        plane.agent(node_id)
    wait_until(lambda: all(plane.nodes().get(n, {}).get("heartbeating") for n in AGENTS),
               timeout=30, what="agents heartbeating")
    old_server = plane.nats_pid()
    assert old_server is not None and alive(old_server)

    os.killpg(first.pid, signal.SIGKILL)        # the OOM killer, `systemctl kill -s KILL`
    first.wait(10)
    # Its server gets the parent-death signal: it does not keep the port.
    wait_until(lambda: not alive(old_server), timeout=10, what="the old server to exit")

    started = time.monotonic()
    plane.up("up-2")
    wait_until(plane.answers, timeout=10, what="the second herd up to answer")
    print(f"second herd up answered {time.monotonic() - started:.1f}s after its start")
    assert "is in use" not in plane.log("up-2")

    # The agents reconnect by themselves and heartbeat to the new server.
    wait_until(lambda: all((plane.nodes().get(n, {}).get("heartbeat_age") or 99) < 2.0
                           for n in AGENTS), timeout=20, what="agents heartbeating again")
    time.sleep(8.5)    # one heartbeat timeout after they are back
    nodes = plane.nodes()
    assert all(nodes[n]["state"] == "READY" for n in AGENTS), nodes
    assert liveness_events(plane.url) == []

    plane.stop()
    assert plane.up_proc is not None and plane.up_proc.returncode == 0
    wait_until(lambda: running_with(str(plane.data_dir)) == [], timeout=5,
               what="nothing of the data dir running")


def test_a_server_an_earlier_herd_up_left_running_is_stopped_by_the_next(plane: Plane) -> None:
    """Where the parent-death signal did not reach it (another OS, an older herdbook, a
    server started by hand with this data dir's config): found by its pid file and
    command line, stopped, replaced."""
    plane.up()
    wait_until(plane.answers, timeout=30, what="herd up to answer")
    plane.stop()
    conf = plane.data_dir / "nats" / "nats-server.conf"
    from herdbook.natsd.embedded import find_binary
    stray = subprocess.Popen([find_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: plane.nats_pid() == stray.pid, timeout=5, what="its pid file")
        plane.up("up-2")
        wait_until(plane.answers, timeout=15, what="the second herd up to answer")
        assert stray.wait(5) is not None
        assert "an earlier herd up left it running" in plane.log("up-2")
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()


def test_a_killed_embedded_server_is_restarted(plane: Plane) -> None:
    plane.up()
    wait_until(plane.answers, timeout=30, what="herd up to answer")
    first = plane.nats_pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: plane.nats_pid() not in (None, first), timeout=10,
               what="a new server")
    wait_until(plane.answers, timeout=10, what="herd up to answer again")
    assert plane.up_proc is not None and plane.up_proc.poll() is None
    restarts = [line for line in plane.log().splitlines() if "restarting it on port" in line]
    assert len(restarts) == 1, restarts
    assert "(1 of 3 within 60s)" in restarts[0]


def test_a_server_that_keeps_dying_ends_herd_up_with_one_line(plane: Plane) -> None:
    up = plane.up()
    wait_until(plane.answers, timeout=30, what="herd up to answer")
    killed: set[int] = set()
    deadline = time.monotonic() + 30
    while up.poll() is None and time.monotonic() < deadline:
        pid = plane.nats_pid()
        if pid is not None and pid not in killed and alive(pid):
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.02)
    assert up.wait(10) == 1
    out = plane.log()
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, out
    assert errors[0].startswith("Error: embedded nats-server died 4 times within 60s; giving up")
    assert out.rstrip().splitlines()[-1] == errors[0]
    assert len(killed) == 4
    assert running_with(str(plane.data_dir)) == []
