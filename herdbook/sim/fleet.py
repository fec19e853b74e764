"""The simulated fleet: real in-process ``Agent`` objects with fake GPUs (a subclass whose
heartbeats a ``partition`` pauses), or lightweight nodes that one task registers and
heartbeats by the thousand.

A partitioned agent keeps running (its process is there) but what it publishes on its
own — heartbeats and periodic health reports — is lost, as behind a broken link.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Protocol, cast

import msgspec
import nats
from nats.aio.client import Client as NATS

import herdbook
from herdbook.agent.main import Agent, AgentOptions
from herdbook.agent.protocol import MemorySequence, NodeProtocol, send_heartbeat
from herdbook.agent.reports import NodeReports
from herdbook.events.agent_requests import Fault, InjectReply, InjectRequest
from herdbook.events.codec import encode
from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.store import EventStore
from herdbook.events.subjects import health_subject, inject_subject
from herdbook.sim.scenario import FleetGroup, group_ids

log = logging.getLogger(__name__)

AGENTS_PER_CONNECTION = 100
LIGHT_APPEND_CONCURRENCY = 200
BOOT_ATTEMPTS = 3


class SimError(RuntimeError):
    """An action that cannot be done now (e.g. stop a node that is stopped)."""


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


class SimNode(Protocol):
    node_id: str
    partitioned: bool

    @property
    def running(self) -> bool: ...

    async def start(self, gpus: int | None = None) -> None: ...
    async def stop(self) -> None: ...
    def partition(self, on: bool) -> None: ...
    async def inject(self, fault: str, gpu: int, value: float | None) -> str: ...


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
    request = InjectRequest(fault=cast(Fault, fault), gpu=gpu, value=value)
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


class LightNode:
    """A node that ``LightFleet`` registers and heartbeats; no agent runs for it."""

    def __init__(self, node_id: str, group: FleetGroup, fleet: LightFleet) -> None:
        self.node_id = node_id
        self.group = group
        self.fleet = fleet
        self.protocol = NodeProtocol(node_id, actor=f"agent:{node_id}",
                                     seqs=MemorySequence())
        self.running = False
        self.partitioned = False
        self.registered = False
        self.next_beat = 0.0

    @property
    def boot_id(self) -> str:
        return self.protocol.boot_id

    def heartbeat(self) -> Heartbeat:
        return self.protocol.heartbeat(gpu_count=self.group.gpus,
                                       max_temp_c=45.0 if self.group.gpus else None)

    def info(self) -> NodeInfo:
        gpus = tuple(GpuInfo(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.node_id}/{i}')}",
                             name="NVIDIA H100 80GB HBM3 (sim)", memory_bytes=80 * 1024**3,
                             driver_version="550.54.15-sim")
                     for i in range(self.group.gpus))
        return NodeInfo(hostname=self.node_id, arch="x86_64", os="linux", cpus=64,
                        gpus=gpus, labels=dict(self.group.labels),
                        node_class=self.group.node_class,
                        agent_version=f"{herdbook.__version__}-sim")

    async def start(self, gpus: int | None = None) -> None:
        if self.running:
            raise SimError(f"{self.node_id} is already running")
        await self.fleet.boot(self, passed=gpus is None or gpus == self.group.gpus)

    async def stop(self) -> None:
        if not self.running:
            raise SimError(f"{self.node_id} is not running")
        self.running = False

    def partition(self, on: bool) -> None:
        self.partitioned = on

    async def inject(self, fault: str, gpu: int, value: float | None) -> str:
        if not self.running:
            raise SimError(f"{self.node_id} is not running")
        return await self.fleet.inject(self, fault, gpu, value)


FAULT_EVENTS = {"ecc-dbe": "ecc_dbe", "ecc-sbe": "ecc_sbe", "nvlink": "nvlink", "pcie": "pcie"}


def fault_report(node: LightNode, fault: str, gpu: int, value: float | None) -> HealthReport:
    """The health report an agent would send right after this fault (FakeNvml's
    ``inject`` then ``HealthMonitor.report``)."""
    events: tuple[GpuEvent, ...] = ()
    status = "healthy"
    if fault == "xid":
        events = (GpuEvent(kind="xid", gpu=gpu, xid=int(value or 0)),)
        if int(value or 0) == 79:
            status = "unhealthy"    # the GPU fell off the bus: NVML calls fail
    elif fault == "thermal":
        events = (GpuEvent(kind="thermal", gpu=gpu, value=float(value or 97)),)
    elif fault in FAULT_EVENTS:
        events = (GpuEvent(kind=FAULT_EVENTS[fault], gpu=gpu, value=float(value or 1)),)
    gpu_check = CheckResult(name="gpu", status=status,
                            message="" if status == "healthy" else
                            f"NVML call failed: GPU {gpu} is lost (fallen off the bus)")
    return HealthReport(report_id=uuid.uuid4().hex, node_id=node.node_id,
                        boot_id=node.boot_id, sent_at=time.time(),
                        checks=(gpu_check, CheckResult(name="health_events", status="healthy",
                                                       message=f"{len(events)} events")),
                        events=events)


class LightFleet:
    """Registers, boots and heartbeats many nodes from one task (no agent per node):
    the events an agent appends, through the same ``EventStore``, and core-published
    heartbeats, spread over each node's interval."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.store = EventStore(nc.jetstream())
        self.nodes: list[LightNode] = []
        self._task: asyncio.Task[None] | None = None
        self.heartbeats = 0

    def add(self, node_id: str, group: FleetGroup) -> LightNode:
        node = LightNode(node_id, group, self)
        self.nodes.append(node)
        return node

    async def start(self) -> None:
        semaphore = asyncio.Semaphore(LIGHT_APPEND_CONCURRENCY)

        async def boot(node: LightNode) -> None:
            async with semaphore:
                await self.boot(node)

        self._task = asyncio.create_task(self._heartbeats(), name="light fleet")
        await asyncio.gather(*(boot(node) for node in self.nodes))

    async def boot(self, node: LightNode, passed: bool = True) -> None:
        """Register (first time) or restart (a new boot): then the boot check."""
        protocol = node.protocol
        if not node.registered:
            await self.store.append(protocol.registered(node.info()))
            node.registered = True
        else:
            protocol.new_boot()
            await self.store.append(protocol.boot_started())
        node.running = True
        # As an agent's heartbeat task, which starts with its boot check: the first
        # heartbeat of the new boot does not wait for the next round.
        await self._beat(node)
        checks = {"nvml": "ok", "state_dir": "ok",
                  "gpu_count": "ok" if passed else "found a different GPU count"}
        # As the agent: a failing check is retried, three in a row make the node FAILED.
        for _ in range(1 if passed else BOOT_ATTEMPTS):
            await self.store.append(protocol.boot_checked(checks))
        if passed:
            await self._health(fault_report(node, "clear", 0, None))

    async def inject(self, node: LightNode, fault: str, gpu: int, value: float | None) -> str:
        if fault in ("clear", "driver"):
            return f"{fault}: nothing to report for a lightweight node"
        await self._health(fault_report(node, fault, gpu, value))
        return f"{fault} {value if value is not None else ''} on GPU {gpu}".replace("  ", " ")

    async def _health(self, report: HealthReport) -> None:
        await self.nc.jetstream().publish(health_subject(report.node_id), encode(report),
                                          headers={"Nats-Msg-Id": report.report_id})

    async def _heartbeats(self) -> None:
        """Each node every its interval; a round is spread over the shortest interval."""
        if not self.nodes:
            return
        interval = min(float(n.group.heartbeat_interval) for n in self.nodes)
        chunk = max(1, len(self.nodes) // max(1, int(interval / 0.02)))
        while True:
            started = time.monotonic()
            for i in range(0, len(self.nodes), chunk):
                now = time.monotonic()
                for node in self.nodes[i:i + chunk]:
                    if node.running and now >= node.next_beat:
                        await self._beat(node)
                target = started + interval * (i + chunk) / len(self.nodes)
                await asyncio.sleep(max(0.0, target - time.monotonic()))

    async def _beat(self, node: LightNode) -> None:
        node.next_beat = time.monotonic() + float(node.group.heartbeat_interval) * 0.98
        if node.partitioned:
            return
        try:
            await send_heartbeat(self.nc, node.heartbeat())
            self.heartbeats += 1
        except Exception as err:  # noqa: BLE001 - a lost heartbeat is tolerated
            log.debug("heartbeat of %s not sent: %s", node.node_id, err)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


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
