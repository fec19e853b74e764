"""This control plane's own node (``NodeType.REQUESTER``), on the agent protocol
(``agent/protocol.py``): each start announces a new boot and reports its boot check
(this process is up and serving), then it heartbeats until stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import socket
from collections.abc import Mapping

from nats.aio.client import Client as NATS

import herdbook
from herdbook.agent.protocol import NodeProtocol, send_heartbeat
from herdbook.control.errors import StartupError
from herdbook.events.node import NodeEvent, NodeInfo
from herdbook.events.states import NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import DecideRunner, Decision, KeptChanging

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 5.0


def default_requester_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"requester-{host}"[:128]


def this_host() -> NodeInfo:
    return NodeInfo(hostname=socket.gethostname(), arch=platform.machine(),
                    os=platform.system().lower(), cpus=os.cpu_count() or 0,
                    agent_version=herdbook.__version__)


def decide_boot(view: NodeView | None, node: NodeProtocol,
                info: NodeInfo) -> Decision[NodeEvent]:
    """The boot's announcement (registered as a requester, with its info) and its boot
    check, decided from the node's current version: a heartbeat counts only once its
    boot is announced, so both come before the first one."""
    return Decision(view.version if view is not None else 0,
                    (node.registered(info, NodeType.REQUESTER),
                     node.boot_checked({"control_plane": "ok"})))


class RequesterNode:
    name = "requester node"
    leader_only = False

    def __init__(self, nc: NATS, runner: DecideRunner, nodes: Mapping[str, NodeView],
                 node: NodeProtocol, info: NodeInfo, *, interval: float) -> None:
        """``interval``: seconds between heartbeats, well inside the shortest heartbeat
        timeout (a short test config must not find this node DEGRADED)."""
        self.nc = nc
        self.runner = runner
        self.nodes = nodes
        self.node = node
        self.info = info
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.node.new_boot()
        node_id = self.node.node_id
        try:
            await self.runner.run("node", node_id, lambda _: decide_boot(
                self.nodes.get(node_id), self.node, self.info))
        except KeptChanging as err:
            raise StartupError(f"requester node {node_id} kept changing while "
                               "registering") from err
        self._task = asyncio.create_task(self._heartbeats(), name=self.name)
        await self.nc.flush()

    async def _heartbeats(self) -> None:
        while True:
            try:
                await send_heartbeat(self.nc, self.node.heartbeat())
            except Exception as err:  # noqa: BLE001 - disconnected: heartbeats may be lost
                log.debug("requester heartbeat not sent: %s", err)
            await asyncio.sleep(self.interval)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
