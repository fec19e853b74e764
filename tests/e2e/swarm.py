"""Run N real agents (the Agent class, fake GPUs) in one process, one NATS connection
each: `python -m tests.e2e.swarm URL N STATE_DIR [HEARTBEAT_INTERVAL]`."""

from __future__ import annotations

import asyncio
import signal
import sys

from herdbook.agent.main import Agent, AgentOptions


async def main(url: str, count: int, state_dir: str, interval: float) -> None:
    agents = [Agent(AgentOptions(server=url, node_id=f"swarm-{i:03d}",
                                 state_dir=f"{state_dir}/swarm-{i:03d}", fake_gpus=2,
                                 heartbeat_interval=interval, health_interval=60.0))
              for i in range(count)]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(agent.run()) for agent in agents]
    await stop.wait()
    for agent in agents:
        await agent.stop()
    await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3],
                     float(sys.argv[4]) if len(sys.argv) > 4 else 0.5))
