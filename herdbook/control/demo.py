"""``herd up --demo N``: N in-process agents with fake GPUs on the control plane's own
connection, to try the CLI against."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from nats.aio.client import Client as NATS

if TYPE_CHECKING:
    from herdbook.agent.main import Agent

log = logging.getLogger(__name__)

_DEMO_ID = re.compile(r"demo-(\d{3,})\Z")


def stale_demo_nodes(node_ids: Iterable[str], count: int) -> list[str]:
    """The demo nodes in the view that ``--demo count`` does not simulate (an earlier
    ``--demo 20`` in the same data dir): nobody heartbeats for them, so they go DEGRADED,
    then DOWN, as real nodes whose agent stopped would."""
    return sorted(n for n in node_ids if (m := _DEMO_ID.match(n)) and int(m[1]) >= count)


def stale_warning(stale: list[str], count: int, data_dir: Path) -> str:
    shown = stale[0] if len(stale) == 1 else f"{stale[0]} … {stale[-1]}"
    return (f"--demo {count}: {len(stale)} demo node(s) of an earlier run in this data dir "
            f"({shown}) are not simulated now and will go DEGRADED, then DOWN; start in a "
            f"fresh --data-dir (not {data_dir}), or remove them: herd node delete "
            f"{' '.join(stale) if len(stale) <= 3 else '-l demo=true ...'}")


class DemoAgents:
    name = "demo agents"
    leader_only = False

    def __init__(self, nc: NATS, url: str, data_dir: Path, count: int,
                 known: Iterable[str] = ()) -> None:
        """``known``: the node ids in the view (read at start: demo nodes of an earlier,
        larger ``--demo`` are warned of)."""
        self.known = known
        self.nc = nc
        self.url = url
        self.data_dir = data_dir
        self.count = count
        self._running: list[tuple[Agent, asyncio.Task[None]]] = []

    async def start(self) -> None:
        from herdbook.agent.main import Agent, AgentOptions
        stale = stale_demo_nodes(self.known, self.count)
        if stale:
            log.warning("%s", stale_warning(stale, self.count, self.data_dir.parent))
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
