"""`herd up` without ``--config`` reads ``./herd.yaml``, then ``/etc/herd/herd.yaml``
(``HERD_CONFIG_PATH`` replaces that list, so this needs no root), and says which file it
loaded; the health policy in use is logged when the plane is built. No server starts:
a bad file found on the search path is refused before anything does, which shows it was
read; the ready block's line is checked by tests/integration/test_loopback.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.main import app
from herdbook.config_path import CONFIG_PATH_ENV, DEFAULT_SEARCH, find_config, search_path
from herdbook.control.bootstrap import build_plane
from tests.fakes import FakeClock
from tests.unit.test_bootstrap_ports import Recorder, config


def test_the_default_search_path_is_the_working_directory_then_etc() -> None:
    assert search_path({}) == (Path("herd.yaml"), Path("/etc/herd/herd.yaml")) == DEFAULT_SEARCH
    assert search_path({CONFIG_PATH_ENV: f"a.yaml{os.pathsep}/x/b.yaml"}) == (
        Path("a.yaml"), Path("/x/b.yaml"))
    assert search_path({CONFIG_PATH_ENV: ""}) == ()


def test_the_first_file_that_exists_wins_and_config_overrides_the_search(tmp_path: Path) -> None:
    here, etc = tmp_path / "herd.yaml", tmp_path / "etc.yaml"
    env = {CONFIG_PATH_ENV: f"{here}{os.pathsep}{etc}"}
    assert find_config(None, env) == (None, f"none found ({here}, {etc}): built-in defaults")
    etc.write_text("{}")
    assert find_config(None, env) == (etc, f"{etc} (found on the search path)")
    here.write_text("{}")
    assert find_config(None, env)[0] == here
    given = tmp_path / "given.yaml"
    assert find_config(given, env) == (given, f"{given} (--config)")
    assert find_config(None, {CONFIG_PATH_ENV: ""})[1] == (
        f"none found ({CONFIG_PATH_ENV} is empty): built-in defaults")


def up(tmp_path: Path, env: dict[str, str | None]) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path / "d")], env=env)
    return result.exit_code, result.stderr if hasattr(result, "stderr") else result.output


@pytest.mark.parametrize("first", [True, False])
def test_herd_up_loads_the_file_it_finds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         first: bool) -> None:
    """A bad file found is refused in one line naming it (exit 2): `herd up` read it.
    ``./herd.yaml`` comes before the second (/etc's) file, which is read when it is absent."""
    monkeypatch.chdir(tmp_path)
    etc = tmp_path / "etc" / "herd.yaml"
    etc.parent.mkdir()
    etc.write_text("nats: {bogus: 1}\n")
    if first:
        Path("herd.yaml").write_text("bogus_key: 1\n")
    code, err = up(tmp_path, {CONFIG_PATH_ENV: f"herd.yaml{os.pathsep}{etc}"})
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert line.startswith("Error: herd.yaml: " if first else f"Error: {etc}: "), line
    assert ("bogus_key" if first else "bogus") in line


def test_the_policy_in_use_is_logged_when_the_plane_is_built(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = Path(__file__).resolve().parents[2] / "examples" / "policy-navarch.yaml"
    cfg = config(tmp_path)
    with caplog.at_level(logging.INFO, logger="herdbook.control.bootstrap"):
        build_plane(cfg, clock=FakeClock(), ports=Recorder().ports())
        import msgspec
        cfg = msgspec.structs.replace(cfg, health=msgspec.structs.replace(
            cfg.health, policy=str(policy)))
        build_plane(cfg, clock=FakeClock(), ports=Recorder().ports())
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("health policy")]
    assert said[0].startswith("health policy: built-in default: herdbook format"), said
    assert said[1].startswith(f"health policy: {policy}: Navarch format"), said
