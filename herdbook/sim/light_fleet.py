"""Lightweight simulated nodes: one task registers, boots and heartbeats them by the
thousand, appending the events an agent would through the same ``EventStore`` and
core-publishing its heartbeats; no agent runs for them. A fault is the health report an
agent would send right after it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from nats.aio.client import Client as NATS

import herdbook
from herdbook.agent.protocol import MemorySequence, NodeProtocol, send_heartbeat
from herdbook.events.codec import encode
from herdbook.events.faults import fault_named
from herdbook.events.health_report import CheckResult, CheckStatus, GpuEvent, HealthReport
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.store import EventStore
from herdbook.events.subjects import health_subject
from herdbook.sim.node_control import SimError
from herdbook.sim.scenario import FleetGroup

log = logging.getLogger(__name__)

LIGHT_APPEND_CONCURRENCY = 200
BOOT_ATTEMPTS = 3


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


def fault_report(node: LightNode, fault: str, gpu: int, value: float | None) -> HealthReport:
    """The health report an agent would send right after this fault (FakeNvml's
    ``inject`` then ``HealthMonitor.report``)."""
    events: tuple[GpuEvent, ...] = ()
    status: CheckStatus = "healthy"
    kind = fault_named(fault).event_kind
    if kind == "xid":
        events = (GpuEvent(kind="xid", gpu=gpu, xid=int(value or 0)),)
        if int(value or 0) == 79:
            status = "unhealthy"    # the GPU fell off the bus: NVML calls fail
    elif kind == "thermal":
        events = (GpuEvent(kind="thermal", gpu=gpu, value=float(value or 97)),)
    elif kind is not None:
        events = (GpuEvent(kind=kind, gpu=gpu, value=float(value or 1)),)
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
        self.store = EventStore(nc)
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
