"""Every long-running process stops within 2 s of SIGTERM or SIGINT, whatever NATS is
doing (issue 14): `herd agent` and `herd up --nats-url` against a closed port and
against a SIGSTOPped nats-server, and `herd sim` whose own nats-server is SIGSTOPped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port, wait_until

pytestmark = pytest.mark.e2e
LIMIT = 2.0


def spawn(tmp: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with open(tmp / f"{name}.log", "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "herdbook.cli", *args], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop_time(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> float:
    """Seconds from ``sig`` to the process's exit (killed, and failed, past 10 s)."""
    assert proc.poll() is None, "exited before the signal"
    started = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return float("inf")
    return time.monotonic() - started


def log_of(tmp: Path, name: str) -> str:
    return (tmp / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def server(nats_server: EmbeddedNats) -> Iterator[EmbeddedNats]:
    """The shared nats-server, continued before it is stopped: a test SIGSTOPs it."""
    yield nats_server
    assert nats_server.proc is not None
    try:
        os.kill(nats_server.proc.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


def child_named(parent: int, name: str) -> int | None:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if comm == name and int(rest.split()[1]) == parent:
            return int(stat.parent.name)
    return None


def closed_url() -> str:
    return f"nats://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_agent_against_a_closed_port_stops_at_once(tmp_path: Path, sig: int) -> None:
    proc = spawn(tmp_path, "agent", "agent", "--server", closed_url(), "--node-id", "n1",
                 "--state-dir", str(tmp_path / "n1"), "--fake-gpus", "1")
    time.sleep(2.5)   # well into its connect retries
    assert stop_time(proc, sig) < LIMIT, log_of(tmp_path, "agent")
    assert "Traceback" not in log_of(tmp_path, "agent")


def test_an_agent_of_a_sigstopped_server_stops_in_time(tmp_path: Path,
                                                        server: EmbeddedNats) -> None:
    up = spawn(tmp_path, "up", "up", "--nats-url", server.url, "--data-dir",
               str(tmp_path / "data"), "--node-id", "cp-1")
    try:
        agent = spawn(tmp_path, "agent", "agent", "--server", server.url, "--node-id", "n1",
                      "--state-dir", str(tmp_path / "n1"), "--fake-gpus", "1",
                      "--heartbeat-interval", "0.2")
        wait_until(lambda: (tmp_path / "n1" / "registered.json").exists(), timeout=30,
                   what="the agent registered")
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGSTOP)
        time.sleep(1.0)
        assert stop_time(agent) < LIMIT, log_of(tmp_path, "agent")
        assert stop_time(up) < LIMIT, log_of(tmp_path, "up")
    finally:
        for proc in (up,):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_herd_up_on_a_closed_nats_url_stops_at_once(tmp_path: Path) -> None:
    proc = spawn(tmp_path, "up", "up", "--nats-url", closed_url(), "--data-dir",
                 str(tmp_path / "data"), "--node-id", "cp-1")
    time.sleep(2.5)
    assert stop_time(proc) < LIMIT, log_of(tmp_path, "up")
    assert "Traceback" not in log_of(tmp_path, "up")


def test_herd_sim_whose_server_is_sigstopped_stops_in_time(tmp_path: Path) -> None:
    scenario = tmp_path / "long.yaml"
    scenario.write_text("name: long\nconfig:\n  approval: {auto_approve: true}\n"
                        "fleet:\n  - {count: 2, prefix: n, heartbeat_interval: 200ms}\n"
                        "timeline:\n  - wait_for: {nodes: all, state: READY, timeout: 30s}\n"
                        "  - wait: 120s\n")
    proc = spawn(tmp_path, "sim", "sim", str(scenario), "--data-dir", str(tmp_path / "sim"))
    wait_until(lambda: " ok " in log_of(tmp_path, "sim"), timeout=60, what="the first step")
    nats_pid = wait_until(lambda: child_named(proc.pid, "nats-server"),
                          what="the sim's nats-server")
    os.kill(nats_pid, signal.SIGSTOP)
    try:
        time.sleep(1.0)
        assert stop_time(proc) < LIMIT, log_of(tmp_path, "sim")
    finally:
        try:
            os.kill(nats_pid, signal.SIGCONT)
            os.kill(nats_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_herd_up_on_a_cluster_that_lost_a_member_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C on `herd up --nats-url` once one member of its NATS cluster was SIGKILLed:
    stopped in time, exit 0, no CancelledError traceback (issue 26)."""
    from herdbook.natsd.cluster import LocalCluster

    cluster = LocalCluster(tmp_path / "cluster", base_port=None)
    cluster.start()
    try:
        proc = spawn(tmp_path, "up", "up", "--nats-url", cluster.url, "--data-dir",
                     str(tmp_path / "data"), "--node-id", "cp-1", "--http-port", "0")
        try:
            wait_until(lambda: "is up" in log_of(tmp_path, "up") or proc.poll() is not None,
                       timeout=60, what="herd up ready")
            assert proc.poll() is None, log_of(tmp_path, "up")
            cluster.kill(0)   # the first URL: the member herd up is connected to
            time.sleep(3)
            assert stop_time(proc, signal.SIGINT) < LIMIT, log_of(tmp_path, "up")
            assert proc.returncode == 0, log_of(tmp_path, "up")
            assert "Traceback" not in log_of(tmp_path, "up"), log_of(tmp_path, "up")
            assert "CancelledError" not in log_of(tmp_path, "up")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    finally:
        cluster.stop()
