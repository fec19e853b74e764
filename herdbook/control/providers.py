"""Providers: what creates and destroys instances, behind one small interface."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class ProviderError(Exception):
    """The provider refused or failed; the reason becomes an event."""


@dataclass(frozen=True)
class InstanceSpec:
    instance_id: str
    node_id: str
    pool: str
    node_class: str = "standard"
    labels: dict[str, str] = field(default_factory=dict)
    fake_gpus: int = 8
    heartbeat_interval: float = 10.0
    agent_command: list[str] | None = None


class Provider(Protocol):
    name: str

    async def provision(self, spec: InstanceSpec) -> str:
        """Create the instance; return the provider's reference to it."""
        ...

    async def terminate(self, instance_id: str, provider_ref: str) -> None: ...

    async def list(self) -> list[str]:
        """Instance ids the provider knows to be alive."""
        ...


class LocalProvider:
    """Starts real `herd agent` processes on this host, each with its own state dir and
    node id. They outlive the control plane, as cloud instances do; `terminate` finds
    them again by the pid in their provider reference."""

    name = "local"

    def __init__(self, data_dir: Path, server_url: str,
                 agent_args: Callable[[str, Path], list[str]] | None = None) -> None:
        self.data_dir = data_dir
        self.server_url = server_url
        self.agent_args = agent_args
        """(node id, state dir) -> more `herd agent` options: credentials, TLS."""
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    async def provision(self, spec: InstanceSpec) -> str:
        state_dir = self.data_dir / "instances" / spec.instance_id
        state_dir.mkdir(parents=True, exist_ok=True)
        labels = ",".join(f"{k}={v}" for k, v in {**spec.labels, "pool": spec.pool}.items())
        if spec.agent_command:
            values = {"node_id": spec.node_id, "instance_id": spec.instance_id,
                      "server": self.server_url, "state_dir": str(state_dir)}
            command = [part.format(**values) for part in spec.agent_command]
        else:
            command = [sys.executable, "-m", "herdbook.cli", "agent", "--server", self.server_url,
                       "--node-id", spec.node_id, "--instance-id", spec.instance_id,
                       "--state-dir", str(state_dir), "--labels", labels,
                       "--class", spec.node_class, "--fake-gpus", str(spec.fake_gpus),
                       "--heartbeat-interval", str(spec.heartbeat_interval),
                       "--log-level", "warning"]
            if self.agent_args is not None:
                command += self.agent_args(spec.node_id, state_dir)
        try:
            with open(state_dir / "agent.log", "ab") as log:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        except OSError as err:
            raise ProviderError(f"cannot start {command[0]}: {err.strerror}") from err
        self._procs[spec.instance_id] = proc
        return f"pid:{proc.pid}"

    async def terminate(self, instance_id: str, provider_ref: str) -> None:
        proc = self._procs.pop(instance_id, None)
        pid = proc.pid if proc is not None else _pid(provider_ref)
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        for _ in range(100):
            if proc is not None and proc.poll() is not None:
                return
            if proc is None and not _alive(pid):
                return
            await asyncio.sleep(0.1)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc is not None:
            proc.wait()

    async def list(self) -> list[str]:
        return [iid for iid, proc in self._procs.items() if proc.poll() is None]


def _pid(ref: str) -> int | None:
    try:
        return int(ref.removeprefix("pid:"))
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FakeProvider:
    """Simulated instances: in-process agents with fake GPUs, for large fleets."""

    name = "fake"

    def __init__(self, nc: Any, data_dir: Path) -> None:
        self.nc = nc
        self.data_dir = data_dir
        self._agents: dict[str, tuple[Any, asyncio.Task[None]]] = {}

    async def provision(self, spec: InstanceSpec) -> str:
        from herdbook.agent.main import Agent, AgentOptions
        from herdbook.events.states import NodeClass
        agent = Agent(AgentOptions(
            node_id=spec.node_id, instance_id=spec.instance_id,
            state_dir=str(self.data_dir / "fake-instances" / spec.instance_id),
            labels={**spec.labels, "pool": spec.pool}, node_class=NodeClass(spec.node_class),
            fake_gpus=spec.fake_gpus, heartbeat_interval=spec.heartbeat_interval), nc=self.nc)
        self._agents[spec.instance_id] = (agent, asyncio.create_task(agent.run()))
        return f"fake:{spec.instance_id}"

    async def terminate(self, instance_id: str, provider_ref: str) -> None:
        entry = self._agents.pop(instance_id, None)
        if entry is not None:
            agent, task = entry
            await agent.stop()
            await asyncio.gather(task, return_exceptions=True)

    async def list(self) -> list[str]:
        return list(self._agents)

    async def stop_all(self) -> None:
        for instance_id in list(self._agents):
            await self.terminate(instance_id, "")
