"""The scenarios ship inside the package: `herd sim gpu-failure` finds one by name from
any directory (a build of the package carrying them is
``tests/integration/test_bundled_scenarios_build.py``: it runs setuptools)."""

from __future__ import annotations

from pathlib import Path

import pytest

from herdbook.sim.scenario_file import load_scenario
from herdbook.sim.scenarios import bundled, find


def test_a_bundled_scenario_is_found_by_name_from_a_cwd_without_the_repo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("gpu-failure", "gpu-failure.yaml"):
        path = find(name)
        assert path.is_file() and not path.is_relative_to(tmp_path)
        assert load_scenario(path).name == "gpu-failure"
    assert {"gpu-failure", "cordon-drain", "heartbeat-loss", "auto-replace",
            "validation-gate"} <= set(bundled())


def test_a_file_of_that_name_wins_and_anything_else_is_left_to_the_loader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpu-failure").write_text("name: mine\n")
    assert find("gpu-failure") == Path("gpu-failure")
    assert find("no-such-scenario") == Path("no-such-scenario")
    assert find(tmp_path / "sub" / "cordon-drain") == tmp_path / "sub" / "cordon-drain"
