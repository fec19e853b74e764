"""Transient node reports: heartbeats and resource updates (not domain events)."""

from __future__ import annotations

import msgspec


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
