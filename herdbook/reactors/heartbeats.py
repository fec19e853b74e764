"""Heartbeat acceptance: (boot_id, seq) must be newer than the last accepted."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class NodeBeat:
    last_seen: float            # control-plane monotonic clock
    boot_id: str
    seq: int
    recent_boots: list[str] = field(default_factory=list)
    sent_at: float = 0.0
    running_allocs: int | None = None
    gpu_count: int | None = None
    fingerprint: str | None = None
    reattaching: bool = False


def is_newer(beat: NodeBeat | None, boot_id: str, seq: int) -> bool:
    """Within a boot, ``seq`` must grow. A boot id never seen is a restart and is accepted
    whatever its seq (the agent's state dir may have been wiped); a heartbeat of a
    previous boot is a replay and is refused."""
    if beat is None:
        return True
    if boot_id == beat.boot_id:
        return seq > beat.seq
    return boot_id not in beat.recent_boots
