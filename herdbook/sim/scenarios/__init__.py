"""The scenarios shipped with herdbook, so that `herd sim gpu-failure` runs one by name
after `pip install` (they are package data); `tests/integration/test_sim.py` runs them
all."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def bundled() -> dict[str, Path]:
    """Every bundled scenario by name (its file name without ``.yaml``)."""
    folder = Path(str(resources.files(__name__)))
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}


def find(scenario: str | Path) -> Path:
    """The file `herd sim SCENARIO` runs: ``scenario`` itself when it is a file, else the
    bundled scenario of that name (``gpu-failure`` or ``gpu-failure.yaml``). Anything
    else comes back unchanged, for the loader to refuse in one line."""
    path = Path(scenario)
    if path.exists() or path.parent != Path("."):
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    return bundled().get(name, path)
