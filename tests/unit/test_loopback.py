"""Without --auth, `herd up` (and `herd nats cluster`) listen on loopback only: a
non-loopback host is a usage error unless --auth or --insecure says otherwise. What gets
past the check to a port already listened on is tests/integration/test_loopback.py."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.hosts import is_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost",
                                  "LOCALHOST"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.com",
                                  "128.0.0.1", ""])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


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
