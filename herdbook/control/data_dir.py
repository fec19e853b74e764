"""The control plane's data directory, held by one ``herd up`` at a time."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import TextIO

from herdbook.control.errors import StartupError


class DataDirLock:
    """The first part: an exclusive ``flock`` on ``<data_dir>/herd.lock`` (with this
    process's pid in it), held until stopped. A second ``herd up`` of the same directory
    is refused before it touches anything."""

    name = "data dir lock"
    leader_only = False

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._file: TextIO | None = None

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.data_dir / "herd.lock", "w")  # noqa: SIM115 - held open
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise StartupError(f"another herd up is using {self.data_dir} "
                               "(use another --data-dir)") from err
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    async def stop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
