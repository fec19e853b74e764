"""A build of the package (what `pip install .` installs) carries the bundled scenarios.
Moved from tests/unit/test_bundled_scenarios.py: it runs setuptools in a subprocess."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from herdbook.sim.scenarios import bundled

ROOT = Path(__file__).parents[2]


def test_a_build_of_the_package_carries_the_scenarios(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "herdbook", src / "herdbook",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q",
                    "build_py", "--build-lib", str(tmp_path / "lib")],
                   cwd=src, check=True, capture_output=True, timeout=120)
    shipped = {p.stem for p in (tmp_path / "lib/herdbook/sim/scenarios").glob("*.yaml")}
    assert shipped == set(bundled())
