"""`herd creds` tells whether a nats-server runs for its data dir as it is (issue 16):
never "no nats-server runs here" while one does."""

from __future__ import annotations

from pathlib import Path

from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import herd


def test_a_running_server_without_auth_is_named_not_denied(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    # conftest's server keeps its store in <tmp>/nats: the data dir is <tmp>
    out = tmp_path / "op.creds"
    result = herd("creds", "operator", "--name", "alice", "--data-dir", str(tmp_path),
                  "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "no nats-server runs here" not in result.stdout
    assert "the running nats-server (pid " in result.stdout
    assert "started without --auth" in result.stdout


def test_no_server_is_said_when_none_runs(tmp_path: Path) -> None:
    result = herd("creds", "operator", "--name", "alice", "--data-dir", str(tmp_path),
                  "--out", str(tmp_path / "op.creds"))
    assert result.returncode == 0, result.stderr
    assert "no nats-server runs here" in result.stdout
