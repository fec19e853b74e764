"""Registration, once per node: the sentinel file in the state dir remembers it, and the
stream confirms it (a node deleted since registers again). A restarted agent announces
its new boot (``node.boot_started``) and, when its node info changed meanwhile, appends
``node.info_updated`` instead of registering again.

The announcement expects the node's last event as the claim saw it (``agent/fence.py``):
another agent that announced in between makes it a ``ConflictError``, and the caller
claims again."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from herdbook.agent.fence import NodeLast
from herdbook.agent.info import info_hash
from herdbook.agent.protocol import NodeProtocol
from herdbook.agent.state import AgentState
from herdbook.events.base import Event
from herdbook.events.node import NodeInfo, NodeInfoUpdated

log = logging.getLogger(__name__)

Append = Callable[[Event, int | None], Awaitable[None]]
"""Append an event, expecting the node's last sequence to be the given one (or none)."""


async def register(node: NodeProtocol, state: AgentState, info: NodeInfo, last: NodeLast,
                   append: Append) -> bool:
    """Announce this boot: register unless the sentinel says so and the stream still knows
    this node; return whether it registered."""
    digest = info_hash(info)
    sentinel = state.sentinel()
    if sentinel and sentinel.get("node_id") == node.node_id and last.subject is not None:
        await append(node.boot_started(), last.version)
        if sentinel.get("info_hash") != digest:
            await append(NodeInfoUpdated(node_id=node.node_id, info=info, actor=node.actor),
                         None)
            remember_info(state, node.node_id, info)
        log.info("%s: already registered", node.node_id)
        return False
    event = node.registered(info)
    await append(event, last.version)
    state.write_sentinel(node.node_id, event.event_id, digest, len(info.gpus))
    log.info("%s: registered", node.node_id)
    return True


def remember_info(state: AgentState, node_id: str, info: NodeInfo) -> None:
    """The sentinel keeps the hash of the node info last appended."""
    sentinel = state.sentinel() or {}
    state.write_sentinel(node_id, sentinel.get("event_id", ""), info_hash(info),
                         sentinel.get("gpus"))
