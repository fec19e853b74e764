"""Registration, once per node: the sentinel file in the state dir remembers it, and the
stream confirms it (a node deleted since registers again). A restarted agent whose node
info changed meanwhile appends ``node.info_updated`` instead of registering again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from herdbook.agent.info import info_hash
from herdbook.agent.protocol import NodeProtocol
from herdbook.agent.state import AgentState
from herdbook.events.base import Event
from herdbook.events.node import NodeInfo, NodeInfoUpdated
from herdbook.events.subjects import EVENTS_STREAM, aggregate_filter

log = logging.getLogger(__name__)


async def register(nc: NATS, node: NodeProtocol, state: AgentState, info: NodeInfo,
                   append: Callable[[Event], Awaitable[None]]) -> bool:
    """Register unless the sentinel says so and the stream still knows this node;
    return whether it registered."""
    digest = info_hash(info)
    sentinel = state.sentinel()
    if sentinel and sentinel.get("node_id") == node.node_id:
        last = await last_event_subject(nc, node.node_id)
        if last is not None and not last.endswith(".deleted"):
            if sentinel.get("info_hash") != digest:
                await append(NodeInfoUpdated(node_id=node.node_id, info=info, actor=node.actor))
                remember_info(state, node.node_id, info)
            log.info("%s: already registered", node.node_id)
            return False
    event = node.registered(info)
    await append(event)
    state.write_sentinel(node.node_id, event.event_id, digest, len(info.gpus))
    log.info("%s: registered", node.node_id)
    return True


def remember_info(state: AgentState, node_id: str, info: NodeInfo) -> None:
    """The sentinel keeps the hash of the node info last appended."""
    sentinel = state.sentinel() or {}
    state.write_sentinel(node_id, sentinel.get("event_id", ""), info_hash(info),
                         sentinel.get("gpus"))


async def last_event_subject(nc: NATS, node_id: str) -> str | None:
    """The subject of the node's last event in the stream; None if it has none. Waits
    for NATS to answer."""
    while True:
        try:
            msg = await nc.jetstream().get_last_msg(
                EVENTS_STREAM, aggregate_filter("node", node_id), direct=True)
            return msg.subject
        except NotFoundError:
            return None
        except Exception as err:  # noqa: BLE001 - NATS not ready: wait and retry
            log.warning("cannot read registration state (%s); retrying", err)
            await asyncio.sleep(1.0)
