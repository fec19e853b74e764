"""The node's side of the agent protocol, for every kind of node: the real agent
(``agent/main.py``), the control plane's own requester node (``control/requester.py``) and the
simulator's lightweight nodes (``sim/agent_fleet.py``).

Per boot, a node
1. announces the boot on its own subjects: ``NodeRegistered`` (with the boot id and its
   info) the first time, ``NodeBootStarted`` on a node already registered;
2. heartbeats: ``Heartbeat`` with ``(boot_id, seq)``, ``seq`` growing across restarts
   too. A heartbeat counts only once its boot was announced by the node's own event
   (``reactors/heartbeats.py``), so step 1 comes first;
3. reports its boot check: ``NodeBootChecked``, passed when every check says "ok".

Nothing here builds a NATS client or decides how often to retry: callers pass their
client, append the events with their own policy, and keep their own registration state.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol

from nats.aio.client import Client as NATS

from herdbook.events.codec import encode
from herdbook.events.heartbeat import AgentId, Heartbeat
from herdbook.events.machine import LifecycleTrigger
from herdbook.events.node import NodeBootChecked, NodeBootStarted, NodeInfo, NodeRegistered
from herdbook.events.states import NodeType
from herdbook.events.subjects import heartbeat_subject

log = logging.getLogger(__name__)


class Sequence(Protocol):
    """Where heartbeat ``seq`` numbers come from (``agent.state.SeqAllocator`` persists
    them)."""

    def next(self) -> int: ...


class MemorySequence:
    """A ``seq`` kept in memory: for simulated nodes, which never outlive the process."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last += 1
        return self.last


def new_boot_id() -> str:
    return uuid.uuid4().hex


def next_seq(seqs: Sequence) -> int:
    """The next ``seq``, even on a full disk: ``SeqAllocator`` reserves the block in memory
    before it persists it, so the next call goes on from it without writing."""
    try:
        return seqs.next()
    except OSError as err:
        log.debug("heartbeat sequence not persisted: %s", err)
        return seqs.next()


@dataclass
class NodeProtocol:
    """One node's identity on the wire, and the messages it sends."""

    node_id: str
    actor: str
    seqs: Sequence
    boot_id: str = field(default_factory=new_boot_id)
    agent: AgentId | None = None
    """The process speaking (the real agent names its host and pid; simulated nodes
    need not)."""

    def new_boot(self) -> str:
        """A restart or a reboot: later messages carry a new boot id (announce it)."""
        self.boot_id = new_boot_id()
        return self.boot_id

    def registered(self, info: NodeInfo,
                   node_type: NodeType = NodeType.COMPUTE) -> NodeRegistered:
        return NodeRegistered(node_id=self.node_id, node_type=node_type,
                              boot_id=self.boot_id, info=info, actor=self.actor,
                              agent=self.agent)

    def boot_started(self, reason: str = "agent started",
                     trigger: LifecycleTrigger = LifecycleTrigger.AGENT_STARTED) -> NodeBootStarted:
        return NodeBootStarted(node_id=self.node_id, boot_id=self.boot_id, actor=self.actor,
                               trigger=trigger.value, reason=reason,
                               agent=self.agent if trigger is LifecycleTrigger.AGENT_STARTED
                               else None)

    def boot_checked(self, checks: dict[str, str]) -> NodeBootChecked:
        """Every check by name, "ok" or what failed; passed when all are "ok"."""
        return NodeBootChecked(node_id=self.node_id, boot_id=self.boot_id,
                               passed=all(result == "ok" for result in checks.values()),
                               checks=checks, actor=self.actor)

    def heartbeat(self, *, gpu_count: int = 0, max_temp_c: float | None = None,
                  ecc_sbe: int = 0, ecc_dbe: int = 0, running_allocs: int = 0,
                  reattaching: bool = False, fingerprint: str | None = None,
                  interval: float | None = None) -> Heartbeat:
        return Heartbeat(node_id=self.node_id, boot_id=self.boot_id,
                         seq=next_seq(self.seqs), sent_at=time.time(), gpu_count=gpu_count,
                         max_temp_c=max_temp_c, ecc_sbe=ecc_sbe, ecc_dbe=ecc_dbe,
                         running_allocs=running_allocs, reattaching=reattaching,
                         fingerprint=fingerprint, interval=interval, agent=self.agent)


async def send_heartbeat(nc: NATS, heartbeat: Heartbeat) -> None:
    """Core publish: fire and forget, the stream captures it; while disconnected the
    client buffers it, and a lost heartbeat is tolerated by design."""
    await nc.publish(heartbeat_subject(heartbeat.node_id), encode(heartbeat))
