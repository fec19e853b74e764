"""The simulated fleet: real in-process ``Agent`` objects with fake GPUs (a subclass whose
heartbeats a ``partition`` pauses), or lightweight nodes that one task registers and
heartbeats by the thousand (``sim.light_fleet``).

A partitioned agent keeps running (its process is there) but what it publishes on its
own — heartbeats and periodic health reports — is lost, as behind a broken link.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import msgspec
import nats
from nats.aio.client import Client as NATS

from herdbook.agent.main import Agent, AgentOptions
from herdbook.agent.reports import NodeReports
from herdbook.events.agent_requests import InjectReply, InjectRequest
from herdbook.events.faults import fault_named
from herdbook.events.subjects import inject_subject
from herdbook.sim.light_fleet import LightFleet, LightNode
from herdbook.sim.node_control import SimError, SimNode
from herdbook.sim.scenario import FleetGroup, group_ids

log = logging.getLogger(__name__)

AGENTS_PER_CONNECTION = 100


class PartitionableReports(NodeReports):
    """The agent's own reports; ``partitioned`` drops them."""

    partitioned = False

    async def heartbeat(self) -> None:
        if not self.partitioned:
            await super().heartbeat()

    async def send_health(self) -> None:
        if not self.partitioned:
            await super().send_health()


class SimAgent(Agent):
    """The real agent; ``partitioned`` drops what it would publish by itself."""

    reports_class = PartitionableReports

    @property
    def partitioned(self) -> bool:
        return cast(PartitionableReports, self.reports).partitioned

    @partitioned.setter
    def partitioned(self, on: bool) -> None:
        cast(PartitionableReports, self.reports).partitioned = on


class AgentNode:
    """One real ``Agent`` (fake GPUs) on a shared NATS connection."""

    def __init__(self, node_id: str, group: FleetGroup, nc: NATS, url: str,
                 state_dir: Path) -> None:
        self.node_id = node_id
        self.group = group
        self.nc = nc
        self.url = url
        self.state_dir = state_dir
        self.agent: SimAgent | None = None
        self.task: asyncio.Task[None] | None = None
        self.partitioned = False

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def start(self, gpus: int | None = None) -> None:
        if self.running:
            raise SimError(f"{self.node_id} is already running")
        group = self.group
        self.agent = SimAgent(AgentOptions(
            server=self.url, node_id=self.node_id, state_dir=str(self.state_dir),
            labels=dict(group.labels), node_class=group.node_class,
            heartbeat_interval=float(group.heartbeat_interval),
            health_interval=float(group.health_interval),
            boot_retry_interval=float(group.boot_retry_interval),
            fake_gpus=group.gpus if gpus is None else gpus), nc=self.nc)
        self.agent.partitioned = self.partitioned
        self.task = asyncio.create_task(self.agent.run(), name=f"agent {self.node_id}")

    async def stop(self) -> None:
        if not self.running or self.agent is None or self.task is None:
            raise SimError(f"{self.node_id} is not running")
        await self.agent.stop()
        await asyncio.gather(self.task, return_exceptions=True)

    def partition(self, on: bool) -> None:
        self.partitioned = on
        if self.agent is not None:
            self.agent.partitioned = on

    async def inject(self, fault: str, gpu: int, value: float | None) -> str:
        if not self.running:
            raise SimError(f"{self.node_id} is not running")
        return await inject_agent(self.nc, self.node_id, fault, gpu, value)


async def inject_agent(nc: NATS, node_id: str, fault: str, gpu: int,
                       value: float | None) -> str:
    """Through the agent's own inject subject, as `herd agent inject` does."""
    import nats.errors
    request = InjectRequest(fault=fault_named(fault), gpu=gpu, value=value)
    try:
        msg = await nc.request(inject_subject(node_id), msgspec.json.encode(request),
                               timeout=10)
    except nats.errors.NoRespondersError:
        raise SimError(f"no agent {node_id} is running") from None
    try:
        reply = msgspec.json.decode(msg.data, type=InjectReply)
    except msgspec.DecodeError as err:
        raise SimError(f"{node_id}: a reply that does not decode: {err}") from None
    if not reply.ok:
        raise SimError(f"{node_id}: {reply.error}")
    return reply.result


class Fleet:
    """Every simulated node by id; the NATS connections they share."""

    def __init__(self, url: str, state_dir: Path) -> None:
        self.url = url
        self.state_dir = state_dir
        self.nodes: dict[str, SimNode] = {}
        self.connections: list[NATS] = []
        self.light: LightFleet | None = None

    async def _connect(self) -> NATS:
        nc = await nats.connect(self.url, name="herd-sim", max_reconnect_attempts=-1,
                                reconnect_time_wait=0.5)
        self.connections.append(nc)
        return nc

    async def build(self, groups: list[FleetGroup]) -> None:
        agents = 0
        nc: NATS | None = None
        for group in groups:
            for node_id in group_ids(group):
                if group.lightweight:
                    if self.light is None:
                        self.light = LightFleet(await self._connect())
                    self.nodes[node_id] = self.light.add(node_id, group)
                    continue
                if nc is None or agents % AGENTS_PER_CONNECTION == 0:
                    nc = await self._connect()
                agents += 1
                self.nodes[node_id] = AgentNode(node_id, group, nc, self.url,
                                                self.state_dir / node_id)

    async def start(self) -> None:
        for node in self.nodes.values():
            if isinstance(node, AgentNode):
                await node.start()
        if self.light is not None:
            await self.light.start()

    def get(self, node_id: str) -> SimNode:
        node = self.nodes.get(node_id)
        if node is None:
            raise SimError(f"{node_id} is not a simulated node")
        return node

    async def stop(self) -> None:
        for node in self.nodes.values():
            if isinstance(node, AgentNode) and node.running:
                await node.stop()
        if self.light is not None:
            await self.light.stop()
        for nc in self.connections:
            try:
                await nc.drain()
            except Exception:  # noqa: BLE001 - shutting down
                pass

    def stats(self) -> dict[str, Any]:
        return {"nodes": len(self.nodes),
                "agents": sum(isinstance(n, AgentNode) for n in self.nodes.values()),
                "lightweight": sum(isinstance(n, LightNode) for n in self.nodes.values()),
                "connections": len(self.connections)}
