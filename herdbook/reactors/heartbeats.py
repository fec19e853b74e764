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


def is_newer(beat: NodeBeat | None, boot_id: str, seq: int) -> bool:
    """``seq`` is persisted by the agent, so it grows across restarts; a new boot with a
    lower seq (state dir wiped) is accepted once per boot id, a replay of an old one not."""
    if beat is None:
        return True
    if boot_id == beat.boot_id:
        return seq > beat.seq
    return seq > beat.seq or boot_id not in beat.recent_boots
