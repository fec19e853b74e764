"""What an agent keeps in its state dir: the registration sentinel and the heartbeat
sequence high-water mark. Writes are atomic (temp file + rename)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from herdbook.files import write_atomic

SENTINEL = "registered.json"
SEQ_FILE = "heartbeat-seq"
BOOTS_FILE = "boots.json"
MAX_BOOTS = 16
"""The boots this state dir started that it remembers: a stored heartbeat of one of them
is this agent's own, restarted (``agent/fence.py``)."""


class SeqAllocator:
    """A heartbeat ``seq`` that only grows, across restarts too.

    Reserves blocks of ``block`` numbers and persists only the end of the block, so a
    heartbeat costs no disk write; a crash skips the rest of a block, never repeats one.
    """

    def __init__(self, state_dir: Path, block: int = 100) -> None:
        self.path = state_dir / SEQ_FILE
        self.block = block
        try:
            self._next = int(self.path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            self._next = 0
        self._reserved = self._next

    def next(self) -> int:
        if self._next >= self._reserved:
            self._reserved = self._next + self.block
            write_atomic(self.path, f"{self._reserved}\n")
        self._next += 1
        return self._next


class AgentState:
    def __init__(self, state_dir: str | Path) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seq = SeqAllocator(self.dir)

    def sentinel(self) -> dict[str, Any] | None:
        try:
            data = json.loads((self.dir / SENTINEL).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_sentinel(self, node_id: str, event_id: str, info_hash: str,
                       gpus: int | None = None) -> None:
        """``gpus``: the GPU count registered, what later boot checks expect to find."""
        write_atomic(self.dir / SENTINEL, json.dumps(
            {"node_id": node_id, "event_id": event_id, "info_hash": info_hash,
             "gpus": gpus}) + "\n")

    def own_boots(self) -> list[str]:
        """The boot ids this state dir started, newest first."""
        try:
            data = json.loads((self.dir / BOOTS_FILE).read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [b for b in data if isinstance(b, str)] if isinstance(data, list) else []

    def remember_boot(self, boot_id: str) -> list[str]:
        """Record a boot before it is announced or heartbeats; return the boots known."""
        boots = [boot_id, *(b for b in self.own_boots() if b != boot_id)][:MAX_BOOTS]
        write_atomic(self.dir / BOOTS_FILE, json.dumps(boots) + "\n")
        return boots
