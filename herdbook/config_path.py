"""Where `herd up` finds its config when no ``--config`` is given: ``./herd.yaml``, then
``/etc/herd/herd.yaml``, the first that exists, as an operator who runs nomad or
nats-server looks for it. ``HERD_CONFIG_PATH`` (files separated by ``:``) replaces that
list: a deployment that keeps its file elsewhere, and a test that cannot write /etc.
An empty ``HERD_CONFIG_PATH`` searches nothing: the built-in defaults. Pure apart from
asking whether each file exists."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CONFIG_PATH_ENV = "HERD_CONFIG_PATH"
DEFAULT_SEARCH = (Path("herd.yaml"), Path("/etc/herd/herd.yaml"))


def search_path(environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The files `herd up` tries in order, ``HERD_CONFIG_PATH`` if set."""
    value = environ.get(CONFIG_PATH_ENV)
    if value is None:
        return DEFAULT_SEARCH
    return tuple(Path(part) for part in value.split(os.pathsep) if part)


def find_config(given: Path | None, environ: Mapping[str, str]) -> tuple[Path | None, str]:
    """The config file to load and how it was chosen, for the ready block: ``given``
    (``--config``) as it is; else the first file of the search path that exists (one
    that exists but cannot be read is still chosen, so loading it says why rather than
    quietly falling through to the next); else None, the built-in defaults."""
    if given is not None:
        return given, f"{given} (--config)"
    tried = search_path(environ)
    for path in tried:
        if path.exists():
            return path, f"{path.absolute()} (found on the search path)"
    where = (", ".join(str(path) if path.is_absolute() else f"./{path}" for path in tried)
             or f"{CONFIG_PATH_ENV} is empty")
    return None, f"none found ({where}): built-in defaults"
