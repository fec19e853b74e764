"""A real `herd up` without --auth listens on 127.0.0.1 only; a non-loopback host with
--insecure or --auth gets past the check (to a port something already listens on, so
nothing starts). The check itself, without sockets: tests/unit/test_loopback.py."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
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


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something already listens on: `herd up` gets past the host check and then
    stops at "port in use", so nothing is started."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def up(tmp_path: Path, host: str, port: int, *flags: str) -> object:
    config = tmp_path / "herd.yaml"
    config.write_text(f"nats: {{host: '{host}', port: {port}}}\n")
    return CliRunner().invoke(app, ["up", "-c", str(config), "--data-dir",
                                    str(tmp_path / "d"), *flags])


def test_a_non_loopback_host_without_auth_is_refused_in_one_line(
        tmp_path: Path, busy_port: int) -> None:
    result = up(tmp_path, "0.0.0.0", busy_port)
    assert result.exit_code == 2  # type: ignore[attr-defined]
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: nats.host 0.0.0.0 is not a loopback address")
    assert "--auth" in lines[0] and "--insecure" in lines[0]
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("flag", ["--insecure", "--auth"])
def test_insecure_or_auth_gets_past_the_check(tmp_path: Path, busy_port: int,
                                              flag: str) -> None:
    result = up(tmp_path, "0.0.0.0", busy_port, flag)
    assert result.exit_code == 1, result.stderr  # type: ignore[attr-defined]
    assert f"port {busy_port} on 0.0.0.0 is in use" in result.stderr  # type: ignore[attr-defined]
    assert "not a loopback" not in result.stderr  # type: ignore[attr-defined]


def test_auth_in_the_config_file_also_allows_any_host(tmp_path: Path, busy_port: int) -> None:
    config = tmp_path / "herd.yaml"
    config.write_text(f"nats: {{host: 0.0.0.0, port: {busy_port}, auth: true}}\n")
    result = CliRunner().invoke(app, ["up", "-c", str(config), "--data-dir",
                                      str(tmp_path / "d")])
    assert result.exit_code == 1, result.stderr
    assert "is in use" in result.stderr
