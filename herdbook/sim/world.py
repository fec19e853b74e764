"""A simulated world: the control plane (``bootstrap``, its embedded nats-server on a free
port) with their data in one directory, the simulated fleet, and the detection tracker."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from herdbook.api.present import instance_json, node_json
from herdbook.clock import SYSTEM_CLOCK, Clock
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.states import NodeType
from herdbook.events.subjects import API_PREFIX
from herdbook.projector.node_view import NodeView
from herdbook.reactors.sweeper import Sweeper
from herdbook.sim.agent_fleet import Fleet, inject_agent
from herdbook.sim.detections import Detections, latency_summary
from herdbook.sim.scenario import FleetGroup
from herdbook.sim.scenario_file import sim_config_text

CONTROL_NODE_ID = "sim-control"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DataDirError(ValueError):
    pass


def prepare_data_dir(data_dir: str | Path | None) -> tuple[Path, bool]:
    """The run's directory and whether it is a temporary one (removed afterwards). A
    given directory must be new or empty: an old stream would replay an old run."""
    if data_dir is None:
        return Path(tempfile.mkdtemp(prefix="herd-sim-")), True
    path = Path(data_dir)
    if path.exists() and any(path.iterdir()):
        raise DataDirError(f"--data-dir {path} is not empty (a simulation starts from nothing)")
    path.mkdir(parents=True, exist_ok=True)
    return path, False


class NodeFacts(Mapping[str, Any]):
    """One node as the API shows it, computed lazily: the common keys straight from the
    view, the rest from ``node_json`` once."""

    def __init__(self, view: NodeView, sweeper: Sweeper, clock: Clock) -> None:
        self.view = view
        self.sweeper = sweeper
        self.clock = clock
        self._json: dict[str, Any] | None = None

    def _full(self) -> dict[str, Any]:
        if self._json is None:
            view = self.view
            self._json = node_json(view, self.sweeper.heartbeat_age(view.id),
                                   self.sweeper.timeouts(view).heartbeat_timeout,
                                   clock=self.clock)
        return self._json

    def __getitem__(self, key: str) -> Any:
        view = self.view
        match key:
            case "state":
                return view.state
            case "lifecycle":
                return view.lifecycle.value
            case "health":
                return view.health.value
            case "intent":
                return view.intent.value
            case "approval":
                return view.approval.value
            case "schedulable":
                return view.schedulable
            case "labels":
                return view.info.labels
        return self._full()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._full())

    def __len__(self) -> int:
        return len(self._full())


class FleetFacts(Mapping[str, NodeFacts]):
    """The compute nodes of the view (the control plane's own node left out)."""

    def __init__(self, views: Mapping[str, NodeView], sweeper: Sweeper, clock: Clock) -> None:
        self.views = views
        self.sweeper = sweeper
        self.clock = clock

    def __getitem__(self, node_id: str) -> NodeFacts:
        view = self.views[node_id]
        if view.type is not NodeType.COMPUTE:
            raise KeyError(node_id)
        return NodeFacts(view, self.sweeper, self.clock)

    def __iter__(self) -> Iterator[str]:
        return (k for k, v in list(self.views.items()) if v.type is NodeType.COMPUTE)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class LoopLag:
    """How late this process's event loop wakes up: the control plane and every
    simulated node share it, so a late loop delays heartbeats (and can fake a failure)."""

    def __init__(self, tick: float = 0.05) -> None:
        self.tick = tick
        self.samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop lag")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.tick)
            self.samples.append(max(0.0, loop.time() - before - self.tick))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def summary(self) -> dict[str, float | int | None]:
        return latency_summary(self.samples)


class World:
    def __init__(self, config_overrides: dict[str, Any], groups: list[FleetGroup],
                 data_dir: Path) -> None:
        self.data_dir = data_dir
        self.groups = groups
        base = {"data_dir": str(data_dir / "control"), "node_id": CONTROL_NODE_ID,
                "nats": {"port": free_port()}}
        self.config = parse_config(sim_config_text(config_overrides, base), "config")
        self.plane = bootstrap(self.config, clock=SYSTEM_CLOCK)
        self.fleet: Fleet | None = None
        self.nc: NATS | None = None
        self.detections = Detections(clock=self.plane.clock.monotonic)
        self.fleet_ids: list[str] = []
        self.loop_lag = LoopLag()

    async def start(self) -> None:
        self.loop_lag.start()
        await self.plane.start()
        self.plane.projector.nodes.subscribe(self.detections.on_event)
        self.nc = await nats.connect(self.plane.url, name="herd-sim-control",
                                     max_reconnect_attempts=-1)
        self.fleet = Fleet(self.plane.url, self.data_dir / "agents")
        await self.fleet.build(self.groups)
        self.fleet_ids = list(self.fleet.nodes)
        await self.fleet.start()

    async def stop(self) -> None:
        await self.loop_lag.stop()
        if self.fleet is not None:
            await self.fleet.stop()
        if self.nc is not None:
            try:
                await self.nc.drain()
            except Exception:  # noqa: BLE001 - shutting down
                pass
        await self.plane.stop()

    def nodes(self) -> FleetFacts:
        return FleetFacts(self.plane.projector.nodes, self.plane.sweeper, self.plane.clock)

    def instances(self) -> list[dict[str, Any]]:
        return [instance_json(i) for i in list(self.plane.projector.instances.values())]

    async def inject(self, node_id: str, fault: str, gpu: int, value: float | None) -> str:
        """Into a simulated node, or any running agent with fake GPUs (a pool's)."""
        assert self.fleet is not None and self.nc is not None
        if node_id in self.fleet.nodes:
            return await self.fleet.get(node_id).inject(fault, gpu, value)
        return await inject_agent(self.nc, node_id, fault, gpu, value)

    async def call(self, route: str, body: dict[str, Any], timeout: float = 15.0
                   ) -> dict[str, Any]:
        assert self.nc is not None
        msg = await self.nc.request(f"{API_PREFIX}.{route}", json.dumps(body).encode(),
                                    timeout=timeout)
        reply: dict[str, Any] = json.loads(msg.data)
        return reply

    async def report_status(self) -> dict[str, Any]:
        """`herd status` for a report: empty if the control plane does not answer."""
        try:
            return dict((await self.call("status", {}, timeout=5))["result"])
        except Exception:  # noqa: BLE001 - only for the report
            return {}


def remove_data_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
