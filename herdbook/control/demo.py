"""``herd up --demo N``: N in-process agents with fake GPUs on the control plane's own
connection, to try the CLI against."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from nats.aio.client import Client as NATS

if TYPE_CHECKING:
    from herdbook.agent.main import Agent


class DemoAgents:
    name = "demo agents"
    leader_only = False

    def __init__(self, nc: NATS, url: str, data_dir: Path, count: int) -> None:
        self.nc = nc
        self.url = url
        self.data_dir = data_dir
        self.count = count
        self._running: list[tuple[Agent, asyncio.Task[None]]] = []

    async def start(self) -> None:
        from herdbook.agent.main import Agent, AgentOptions
        for i in range(self.count):
            node_id = f"demo-{i:03d}"
            options = AgentOptions(
                server=self.url, node_id=node_id, state_dir=str(self.data_dir / node_id),
                labels={"demo": "true", "rack": f"r{i % 4}"}, fake_gpus=8,
                heartbeat_interval=5.0)
            agent = Agent(options, nc=self.nc)
            self._running.append((agent, asyncio.create_task(agent.run(), name=node_id)))

    async def stop(self) -> None:
        running, self._running = self._running, []
        for agent, _ in running:
            await agent.stop()
        for _, task in running:
            task.cancel()
        await asyncio.gather(*(task for _, task in running), return_exceptions=True)
