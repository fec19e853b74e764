"""Files written whole or not at all, for the agent's state and a reactor's position."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """After a crash ``path`` holds the old text or the new one, never a part of either
    (temp file, fsync, rename)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
