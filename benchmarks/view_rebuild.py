"""View rebuild rate: events/s folded from sequence 1 into a fresh SQLite view."""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import nats

from benchmarks.common import report, start_server, stop_server
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.node import NodeApproved, NodeDegraded, NodeInfo, NodeRecovered, NodeRegistered
from herdbook.events.store import stream_last_seq, subject_of
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.runner import ProjectorRunner


async def main(events: int, nodes: int) -> None:
    server, tmp = start_server()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        rng = random.Random(1)
        info = NodeInfo(hostname="h", arch="x86_64", cpus=64, memory_bytes=1 << 40,
                        labels={"zone": "a"})
        for i in range(events):
            node_id = f"node-{rng.randrange(nodes)}"
            kind = i % 4
            event = (NodeRegistered(node_id=node_id, boot_id="b", info=info) if kind == 0 else
                     NodeApproved(node_id=node_id) if kind == 1 else
                     NodeDegraded(node_id=node_id, heartbeat_age=31.0) if kind == 2 else
                     NodeRecovered(node_id=node_id))
            await nc.publish(subject_of(event), encode(event))
            if i % 10_000 == 0:
                await nc.flush()
        await nc.flush()
        last, previous = 0, -1
        while last != previous:
            previous = last
            await asyncio.sleep(0.5)
            last = await stream_last_seq(nc.jetstream(), EVENTS_STREAM)
        runner = ProjectorRunner(nc, str(tmp / "view.db"))
        start = time.monotonic()
        await runner.start()
        await runner.wait_applied(last, timeout=600)
        elapsed = time.monotonic() - start
        await runner.stop()
        await nc.close()
        report("view rebuild", f"{last / elapsed:,.0f} events/s ({last} events, "
               f"{len(runner.nodes)} nodes, {elapsed:.2f}s)", ">= 100,000 events/s",
               f"python -m benchmarks.view_rebuild --events {events} --nodes {nodes}")
    finally:
        stop_server(server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.nodes))
