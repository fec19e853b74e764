"""Sustained heartbeat ingest: heartbeats/s accepted by a running control plane.

Publishes heartbeats for --nodes nodes (core publish, as agents do) as fast as one
process can for --seconds, and counts what the control plane's sweeper accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import nats

from benchmarks.common import report, start_server
from herdbook.config import parse_config
from herdbook.control.app import ControlPlane
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat


async def main(nodes: int, seconds: float) -> None:
    server, tmp = start_server()
    try:
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = ControlPlane(config)
        await plane.start()
        assert plane.sweeper is not None
        nc = await nats.connect(server.url)
        payloads = [[(f"herd.hb.n{i}", encode(Heartbeat(node_id=f"n{i}", boot_id="b", seq=s,
                                                          gpu_count=8, max_temp_c=55.0)))
                     for i in range(nodes)] for s in (1, 2)]
        sent = 0
        start = time.monotonic()
        seq = 0
        base = plane.sweeper.accepted
        while time.monotonic() - start < seconds:
            seq += 1
            for i in range(nodes):
                data = encode(Heartbeat(node_id=f"n{i}", boot_id="b", seq=seq, gpu_count=8,
                                        max_temp_c=55.0))
                await nc.publish(f"herd.hb.n{i}", data)
                sent += 1
                if sent % 5000 == 0:
                    await nc.flush()
        await nc.flush()
        sent_s = time.monotonic() - start
        while plane.sweeper.accepted - base < sent * 0.99 and time.monotonic() - start < seconds * 4:
            await asyncio.sleep(0.05)
        elapsed = time.monotonic() - start
        accepted = plane.sweeper.accepted - base
        del payloads
        await nc.close()
        await plane.stop()
        print(f"sent {sent} heartbeats in {sent_s:.1f}s; accepted {accepted} in {elapsed:.1f}s")
        report("heartbeat ingest", f"{accepted / elapsed:,.0f} heartbeats/s", ">= 20,000/s",
               f"python -m benchmarks.heartbeat_ingest --nodes {nodes} --seconds {seconds:g}")
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.seconds))
