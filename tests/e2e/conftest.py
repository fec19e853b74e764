"""The e2e fleet: a real `herd up` and real `herd agent` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port, herd, wait_until
from tests.servers import nats_server, nc, nc_without_atomic  # noqa: F401 - fixtures

CONFIG = """
lifecycle:
  heartbeat_timeout: 1s
  grace_period:
    standard: 1500ms
"""

JOBS_CONFIG = CONFIG + """\
approval:
  auto_approve: true
scheduler:
  unblock_delay: 100ms
allocations:
  checkpoint_grace: 2s
  kill_timeout: 1s
"""
"""A fleet that runs jobs quickly: nodes approved on arrival, a blocked eval retried
within 100 ms, a stopped allocation killed within a second (tests/e2e/test_jobs.py, the
browser tests)."""


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "herdbook.cli", *args],
                                    stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def up(self, config: str = CONFIG, *extra: str) -> subprocess.Popen[bytes]:
        (self.tmp / "herd.yaml").write_text(config)
        proc = self.spawn("up", "up", "--config", str(self.tmp / "herd.yaml"), "--nats-port",
                          str(self.port), "--data-dir", str(self.tmp / "data"), "--node-id",
                          "cp-1", *extra)
        wait_until(lambda: herd("node", "list", server=self.url).returncode == 0,
                   what="herd up to answer")
        return proc

    def agent(self, node_id: str, *extra: str) -> subprocess.Popen[bytes]:
        gpus = [] if "--fake-gpus" in extra else ["--fake-gpus", "2"]
        return self.spawn(node_id, "agent", "--server", self.url, "--node-id", node_id,
                          "--state-dir", str(self.tmp / node_id), *gpus,
                          "--heartbeat-interval", "0.2", *extra)

    def nodes(self) -> dict[str, dict[str, object]]:
        out = herd("node", "list", "-o", "json", server=self.url, check=True)
        return {n["id"]: n for n in json.loads(out.stdout)}

    def state(self, node_id: str) -> object:
        return self.nodes().get(node_id, {}).get("state")

    def describe(self, node_id: str) -> dict[str, Any]:
        """`herd node describe NODE -o json`."""
        out = herd("node", "describe", node_id, "-o", "json", server=self.url, check=True)
        return dict(json.loads(out.stdout))

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.kill_workloads()

    def kill_workloads(self) -> None:
        """Agents leave their workloads running by design (they survive an agent
        restart): kill every process group an agent recorded."""
        for state in self.tmp.glob("*/agent-state.json"):
            try:
                entries = json.loads(state.read_text()).get("allocs", [])
            except (OSError, ValueError):
                continue
            for entry in entries:
                try:
                    os.killpg(int(entry["pgid"]), signal.SIGKILL)
                except (OSError, KeyError, ValueError):
                    pass


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    try:
        yield f
    finally:
        f.stop()


