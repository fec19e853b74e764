"""Transient node reports: heartbeats and resource updates (not domain events)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec


class AgentId(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Which process speaks for a node: the agent's host, pid and start time (its own
    clock, shown only). One node id has one live agent (DESIGN §9): a second one started
    for the same id is refused with this, naming the holder (``agent/fence.py``)."""

    host: Annotated[str, msgspec.Meta(max_length=255)] = ""
    pid: int = 0
    since: float = 0.0

    def describe(self) -> str:
        when = (datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                if self.since else "an unknown time")
        return f"host {self.host or '?'}, pid {self.pid or '?'}, since {when}"


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """~200 bytes every heartbeat_interval. ``sent_at`` is the agent's clock: shown, never
    used for liveness. (boot_id, seq) orders heartbeats; ``seq`` survives agent restarts."""

    node_id: str
    boot_id: str
    seq: int
    sent_at: float = 0.0
    gpu_count: int = 0
    max_temp_c: float | None = None
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    running_allocs: int = 0
    fingerprint: str | None = None
    reattaching: bool = False
    interval: float | None = None
    """The agent's heartbeat interval in seconds (shown by `herd node describe`)."""
    agent: AgentId | None = None
    """The process sending it: what a second agent for this node id is told, and what the
    control plane names when two agents heartbeat for one node."""


class NodeResources(msgspec.Struct, frozen=True, kw_only=True):
    """Bacalhau's Resource Information: held as the latest value only."""

    node_id: str
    cpus: int = 0
    load_1m: float = 0.0
    memory_total_bytes: int = 0
    memory_available_bytes: int = 0
    disk_free_bytes: int = 0
    gpus_total: int = 0
    gpus_free: int = 0
    sent_at: float = 0.0
