"""Heartbeat acceptance (DESIGN §4, §9).

A heartbeat counts only if

- its subject vouches for it: ``herd.hb.<id>`` with a valid id, the body names that id
  (``events.authority.bind_node_report``) and a valid boot id; else it is dead-lettered;
- the node is known (in the view); else it is dropped before it costs any memory;
- its (boot_id, seq) is newer than the last accepted one (``is_newer``); else a replay;
- its boot was announced: a boot other than the one last accepted counts only once the
  node's view carries it (``node.registered``, ``node.boot_started`` or
  ``node.boot_checked`` of the agent, on the node's own subjects). So a heartbeat with a
  made-up boot id cannot turn the real agent's heartbeats into "replays".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from herdbook.events.heartbeat import AgentId


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
    interval: float | None = None   # the agent's heartbeat interval, as it reports it
    agent: AgentId | None = None    # the process that sent it


@dataclass
class AgentConflict:
    """Heartbeats of another boot than the node's current one, dropped while the current
    one is alive: two agents speak for one node id (DESIGN §9, ``agent/fence.py`` keeps a
    second one out; this is what is left when it could not: an agent older than the
    fence, or one cut off for longer than the timeout and replaced)."""

    boot_id: str
    agent: AgentId | None
    first_seen: float
    last_seen: float
    dropped: int = 0
    logged: bool = False

    def active(self, beat: NodeBeat | None, now: float, window: float) -> bool:
        """Both agents spoke within ``window``: this one twice or more, the current one
        after this one was first heard (a restart's last stray heartbeat is not a
        conflict, nor is a new boot heard before its announcement was folded)."""
        return (self.dropped >= 2 and now - self.last_seen <= window and beat is not None
                and beat.boot_id != self.boot_id and beat.last_seen > self.first_seen
                and now - beat.last_seen <= window)

    def describe(self, beat: NodeBeat | None) -> str:
        other = self.agent.describe() if self.agent is not None else f"boot {self.boot_id}"
        current = (beat.agent.describe() if beat is not None and beat.agent is not None
                   else f"boot {beat.boot_id if beat is not None else '?'}")
        return (f"two agents heartbeat for this node: the current one ({current}) and "
                f"another ({other}), whose {self.dropped} heartbeats were dropped; stop one")


class Admission(Enum):
    ACCEPTED = "accepted"
    REPLAY = "replay"
    """(boot_id, seq) is not newer than the last accepted heartbeat."""
    UNANNOUNCED_BOOT = "unannounced_boot"
    """A boot the node's own events have not announced (yet)."""
    UNKNOWN_NODE = "unknown_node"
    """No such node in the view."""


def is_newer(beat: NodeBeat | None, boot_id: str, seq: int) -> bool:
    """Within a boot, ``seq`` must grow. A boot id never seen is a restart and is accepted
    whatever its seq (the agent's state dir may have been wiped); a heartbeat of a
    previous boot is a replay and is refused."""
    if beat is None:
        return True
    if boot_id == beat.boot_id:
        return seq > beat.seq
    return boot_id not in beat.recent_boots


def judge(beat: NodeBeat | None, announced_boot: str, boot_id: str, seq: int) -> Admission:
    """Whether a heartbeat of a known node counts, given the last accepted one (``beat``)
    and the boot its view carries (``announced_boot``)."""
    if not is_newer(beat, boot_id, seq):
        return Admission.REPLAY
    if (beat is None or boot_id != beat.boot_id) and boot_id != announced_boot:
        return Admission.UNANNOUNCED_BOOT
    return Admission.ACCEPTED
