"""``agent-state.json``: the workloads an agent runs, kept across its restarts so the next
agent reattaches to them. Written atomically (temp file + rename); a file that cannot be
read, or that belongs to another node, is set aside and nothing is reattached."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec

from herdbook.files import write_atomic

log = logging.getLogger(__name__)

STATE_FILE = "agent-state.json"


class StateEntry(msgspec.Struct, kw_only=True):
    """One local workload as ``agent-state.json`` keeps it."""

    alloc_id: str
    job_id: str
    index: int = 0
    pid: int
    pgid: int
    started_at: float
    """Wall clock, seconds since the epoch."""
    proc_start: int | None = None
    """Field 22 of /proc/<pid>/stat: tells our process from a later one with the same pid."""
    log: str
    exit_file: str
    stopping: bool = False
    """A stop was requested: its end is reported as ``alloc.stopped``."""


class StateFile(msgspec.Struct, kw_only=True):
    version: int = 1
    node_id: str
    allocs: list[StateEntry] = []


def write_state(path: Path, node_id: str, entries: list[StateEntry]) -> None:
    write_atomic(path, msgspec.json.encode(StateFile(node_id=node_id, allocs=entries)).decode()
                 + "\n")


def read_state(path: Path, node_id: str) -> list[StateEntry]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    try:
        state = msgspec.json.decode(data, type=StateFile)
    except msgspec.DecodeError as err:
        kept = path.with_name(path.name + ".bad")
        os.replace(path, kept)
        log.error("%s is unreadable (%s); kept as %s, its workloads are not reattached",
                  path, err, kept)
        return []
    if state.node_id != node_id:
        log.error("%s belongs to node %s, not %s; its workloads are not reattached",
                  path, state.node_id, node_id)
        return []
    return list(state.allocs)
