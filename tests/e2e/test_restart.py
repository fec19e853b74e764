"""A control plane restarted while 50 agents heartbeat marks none of them DEGRADED."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import herd, wait_until

pytestmark = pytest.mark.e2e

CONFIG = "lifecycle: {heartbeat_timeout: 2s, grace_period: {standard: 5s}}\n"


def start_up(url: str, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    (tmp / "herd.yaml").write_text(CONFIG)
    with open(tmp / f"{name}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "herdbook.cli", "up", "--nats-url", url, "--config",
             str(tmp / "herd.yaml"), "--data-dir", str(tmp / "data"), "--node-id", "cp-1"],
            stdout=log, stderr=subprocess.STDOUT)


def ready_count(url: str) -> int:
    out = herd("node", "list", "-o", "json", "--filter-state", "ready", server=url)
    if out.returncode != 0:
        return 0
    return len([n for n in json.loads(out.stdout) if n["id"].startswith("swarm-")])


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL])
def test_a_control_plane_restart_marks_no_heartbeating_node_degraded(
        nats_server, tmp_path: Path, stop_signal: signal.Signals) -> None:  # type: ignore[no-untyped-def]
    up = start_up(nats_server.url, tmp_path, "up-1")
    swarm = subprocess.Popen([sys.executable, "-m", "tests.e2e.swarm", nats_server.url, "50",
                              str(tmp_path / "agents"), "0.5"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: ready_count(nats_server.url) == 50, timeout=60, what="50 READY")
        up.send_signal(stop_signal)
        up.wait(20)
        time.sleep(1.5)     # down for most of heartbeat_timeout; the agents keep beating
        up = start_up(nats_server.url, tmp_path, "up-2")
        wait_until(lambda: ready_count(nats_server.url) == 50, timeout=30, what="answering")
        time.sleep(4.0)     # two heartbeat timeouts after the restart
        assert ready_count(nats_server.url) == 50
        degraded = herd("events", "tail", "-o", "json", "--subject", "herd.node.*.degraded",
                        server=nats_server.url, check=True)
        assert degraded.stdout == ""
    finally:
        swarm.send_signal(signal.SIGTERM)
        up.send_signal(signal.SIGTERM)
        swarm.wait(20)
        up.wait(20)
