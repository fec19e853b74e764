"""Sustained heartbeat ingest: heartbeats/s a running control plane accepts.

A separate publisher process sends heartbeats for --nodes nodes at --rate per second
(core publish, as agents do) for --seconds; the control plane's sweeper counts what it
accepted. Ingest is sustained when accepted ≈ sent.
"""

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
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import subject_of


async def publish(url: str, nodes: int, rate: int, seconds: float) -> None:
    nc = await nats.connect(url)
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    sent = 0
    seq = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        seq += 1
        for i in range(nodes):
            await nc.publish(f"herd.hb.n{i}", encode(Heartbeat(
                node_id=f"n{i}", boot_id="b", seq=seq, gpu_count=8, max_temp_c=55.0)))
            sent += 1
            if sent % per_tick == 0:
                await nc.flush()
                behind = start + sent / rate - time.monotonic()
                if behind > 0:
                    await asyncio.sleep(behind)
                if time.monotonic() - start >= seconds:
                    break
    await nc.flush()
    await nc.close()
    print(sent)


async def register(url: str, nodes: int) -> None:
    """Heartbeats of nodes the control plane does not know are dropped uncounted: register
    them (as the agents would) first."""
    nc = await nats.connect(url)
    await ensure_streams(nc, 1, 3600.0)
    for i in range(nodes):
        for event in (NodeRegistered(node_id=f"n{i}", boot_id="b"),
                      NodeBootChecked(node_id=f"n{i}", boot_id="b", passed=True)):
            await nc.publish(subject_of(event), encode(event))
        if i % 10_000 == 0:
            await nc.flush()
    await nc.flush()
    await nc.close()


async def main(nodes: int, rate: int, seconds: float) -> None:
    server, tmp = start_server()
    try:
        await register(server.url, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.sweeper is not None
        base = plane.sweeper.accepted
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.heartbeat_ingest", "--publish-only", server.url,
            "--nodes", str(nodes), "--rate", str(rate), "--seconds", str(seconds),
            stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        sent = int(out.decode().strip().splitlines()[-1])
        await asyncio.sleep(1.0)    # let the last ones arrive
        elapsed = time.monotonic() - start - 1.0
        accepted = plane.sweeper.accepted - base
        await plane.stop()
        print(f"sent {sent} heartbeats for {nodes} nodes in {elapsed:.1f}s; accepted {accepted} "
              f"({accepted / max(sent, 1):.1%})")
        report("heartbeat ingest", f"{accepted / elapsed:,.0f} heartbeats/s accepted "
               f"of {sent / elapsed:,.0f}/s offered", ">= 20,000/s",
               f"python -m benchmarks.heartbeat_ingest --nodes {nodes} --rate {rate} "
               f"--seconds {seconds:g}")
    finally:
        stop_server(server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=25_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--publish-only", metavar="URL")
    args = parser.parse_args()
    if args.publish_only:
        asyncio.run(publish(args.publish_only, args.nodes, args.rate, args.seconds))
    else:
        asyncio.run(main(args.nodes, args.rate, args.seconds))
