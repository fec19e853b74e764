"""`herd creds agent --keep` (deploy/compose.yaml's init step, run at every `up`): a creds
file that holds the node's current password and URL is kept; anything else is issued."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.credentials import read_creds


def issue(tmp_path: Path, *extra: str, host: str = "control") -> str:
    result = CliRunner().invoke(app, ["creds", "agent", "a1", "--data-dir",
                                      str(tmp_path / "d"), "--host", host, "--out",
                                      str(tmp_path / "a1.creds"), *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_keep_keeps_current_credentials_and_issues_otherwise(tmp_path: Path) -> None:
    creds = tmp_path / "a1.creds"
    assert "Ok: agent credentials of node a1" in issue(tmp_path, "--keep")   # no file yet
    first = read_creds(creds)
    assert "Ok: kept" in issue(tmp_path, "--keep")
    assert read_creds(creds) == first
    issue(tmp_path, "--keep", host="elsewhere")          # the URL changed: issued again
    moved = read_creds(creds)
    assert moved.password != first.password and "elsewhere" in str(moved.url)
    issue(tmp_path, host="elsewhere")                    # without --keep: a new password
    assert read_creds(creds).password != moved.password
    creds.write_text(creds.read_text().replace(read_creds(creds).password, "stale"))
    assert "Ok: agent credentials" in issue(tmp_path, "--keep", host="elsewhere")
    creds.write_text("not json")
    assert "Ok: agent credentials" in issue(tmp_path, "--keep", host="elsewhere")
