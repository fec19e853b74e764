"""A real `herd up` without --auth listens on 127.0.0.1 only."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_until

PROC_NET = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


def listening_on(port: int) -> set[str]:
    """The local addresses of the sockets in LISTEN state on ``port`` (Linux /proc)."""
    found: set[str] = set()
    for table in PROC_NET:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":
                if len(address) == 8:
                    found.add(".".join(str(b) for b in reversed(bytes.fromhex(address))))
                else:
                    found.add(address)
    return found


@pytest.mark.skipif(not PROC_NET[0].exists(), reason="reads the listening sockets in /proc")
def test_herd_up_without_auth_listens_on_127_0_0_1_only(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "up.out"
    # no --config: the ready block names the ./herd.yaml it found (config_path)
    (tmp_path / "herd.yaml").write_text("approval: {auto_approve: false}\n")
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [sys.executable, "-m", "herdbook.cli", "up", "--nats-port", str(port),
             "--data-dir", str(tmp_path / "d"), "--node-id", "cp-loopback",
             "--log-level", "warning"], stdout=stdout, stderr=subprocess.STDOUT,
            cwd=tmp_path)
    try:
        wait_until(lambda: "is up" in out.read_text(), timeout=60, what="herd up")
        assert listening_on(port) == {"127.0.0.1"}
        assert f"listening on nats://127.0.0.1:{port}" in out.read_text()
        assert f"config:            {tmp_path / 'herd.yaml'} (found on the search path)" in (
            out.read_text())
        assert "health policy:     built-in default" in out.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, out.read_text()
