"""Without --auth, `herd up` (and `herd nats cluster`) listen on loopback only: a
non-loopback host is a usage error unless --auth or --insecure says otherwise."""

from __future__ import annotations

import fcntl
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.natsd.server import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost",
                                  "LOCALHOST"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.com",
                                  "128.0.0.1", ""])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


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


def test_with_nats_url_the_host_is_not_checked(tmp_path: Path) -> None:
    """An external NATS: `herd up` listens on nothing, so nats.host means nothing. The data
    dir is held by "another herd up", so it stops right after the check."""
    config = tmp_path / "herd.yaml"
    config.write_text("nats: {host: 0.0.0.0}\n")
    (tmp_path / "d").mkdir()
    with open(tmp_path / "d" / "herd.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = CliRunner().invoke(app, ["up", "-c", str(config), "--data-dir",
                                          str(tmp_path / "d"), "--nats-url",
                                          "nats://127.0.0.1:1"])
    assert result.exit_code == 1, result.stderr
    assert "another herd up is using" in result.stderr


def test_a_local_cluster_on_a_non_loopback_host_needs_insecure(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nats", "cluster", "--dir", str(tmp_path / "c"),
                                      "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "Error: --host 0.0.0.0 is not a loopback address and the server has no credentials, "
        "so anyone who reaches it may act as any node or operator: pass --insecure to "
        "listen there anyway"]
    assert not (tmp_path / "c").exists()
