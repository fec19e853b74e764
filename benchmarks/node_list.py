"""`herd node list` wall time at N nodes, process start included (a real subprocess)."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

import nats

from benchmarks.common import report, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.node import NodeInfo, NodeRegistered
from herdbook.events.store import subject_of


async def main(nodes: int, runs: int, output: str) -> None:
    server, tmp = start_server()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        info = NodeInfo(hostname="h", arch="x86_64", cpus=64, labels={"zone": "a"})
        for i in range(nodes):
            event = NodeRegistered(node_id=f"node-{i:06d}", info=info)
            await nc.publish(subject_of(event), encode(event))
        await nc.flush()
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.projector is not None
        while len(plane.projector.nodes) < nodes:
            await asyncio.sleep(0.1)
        walls = []
        for _ in range(runs):
            start = time.monotonic()
            result = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "herdbook.cli", "--server", server.url,
                                 "node", "list", "-o", output], capture_output=True)
            walls.append(time.monotonic() - start)
            assert result.returncode == 0, result.stderr
        await plane.stop()
        await nc.close()
        walls.sort()
        report(f"herd node list -o {output} at {nodes} nodes",
               f"median {walls[len(walls) // 2]:.2f}s, best {walls[0]:.2f}s", "<= 0.5 s",
               f"python -m benchmarks.node_list --nodes {nodes} --output {output}")
    finally:
        stop_server(server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", default="json")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.runs, args.output))
