"""Sustained heartbeat ingest: heartbeats/s a running control plane accepts.

A separate publisher process sends heartbeats for --nodes nodes at --rate per second
(core publish, as agents do) for --seconds; the control plane's sweeper counts what it
accepted. Ingest is sustained when accepted ≈ sent.

``--sizes 10000,50000,100000`` runs each fleet size on a fresh server and prints a table
with the cost per heartbeat: CPU µs of the control plane (this process, every thread)
and of nats-server per heartbeat accepted, which should stay flat as the fleet grows.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from typing import NamedTuple

import nats

from benchmarks.common import cpu_seconds, report, sizes_arg, start_server, stop_server
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


class Row(NamedTuple):
    nodes: int
    offered: float
    accepted: float
    plane_us: float
    """CPU µs of the control plane (this process) per heartbeat accepted."""
    server_us: float


async def one_size(nodes: int, rate: int, seconds: float) -> Row:
    server, tmp = start_server()
    try:
        await register(server.url, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.sweeper is not None and server.proc is not None
        await plane.projector.catch_up(timeout=600)
        base = plane.sweeper.accepted
        start, cpu, server_cpu = time.monotonic(), time.process_time(), cpu_seconds(server.proc.pid)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.heartbeat_ingest", "--publish-only", server.url,
            "--nodes", str(nodes), "--rate", str(rate), "--seconds", str(seconds),
            stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        sent = int(out.decode().strip().splitlines()[-1])
        await asyncio.sleep(1.0)    # let the last ones arrive
        elapsed = time.monotonic() - start - 1.0
        accepted = plane.sweeper.accepted - base
        cpu, server_cpu = time.process_time() - cpu, cpu_seconds(server.proc.pid) - server_cpu
        await plane.stop()
        print(f"sent {sent} heartbeats for {nodes} nodes in {elapsed:.1f}s; accepted {accepted} "
              f"({accepted / max(sent, 1):.1%})", flush=True)
        return Row(nodes, sent / elapsed, accepted / elapsed, 1e6 * cpu / max(accepted, 1),
                   1e6 * server_cpu / max(accepted, 1))
    finally:
        stop_server(server, tmp)


async def main(sizes: list[int], rate: int, seconds: float) -> None:
    rows = [await one_size(nodes, rate, seconds) for nodes in sizes]
    print("\n| nodes | offered/s | accepted/s | accepted | control plane CPU µs/heartbeat "
          "| nats-server CPU µs/heartbeat |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.nodes:,} | {row.offered:,.0f} | {row.accepted:,.0f} | "
              f"{row.accepted / max(row.offered, 1):.1%} | {row.plane_us:.1f} | {row.server_us:.1f} |")
    last = rows[-1]
    report("heartbeat ingest", f"{last.accepted:,.0f} heartbeats/s accepted of {last.offered:,.0f}/s "
           f"offered ({last.nodes:,} nodes)", ">= 20,000/s",
           f"python -m benchmarks.heartbeat_ingest --sizes {','.join(map(str, sizes))} "
           f"--rate {rate} --seconds {seconds:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=200_000, help="one fleet size")
    parser.add_argument("--sizes", type=sizes_arg, help="several fleet sizes, e.g. 10000,50000,100000")
    parser.add_argument("--rate", type=int, default=25_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--publish-only", metavar="URL")
    args = parser.parse_args()
    if args.publish_only:
        asyncio.run(publish(args.publish_only, args.nodes, args.rate, args.seconds))
    else:
        if args.nodes < 1 or args.rate < 1 or args.seconds <= 0:
            parser.error("--nodes, --rate and --seconds must be positive")
        asyncio.run(main(args.sizes or [args.nodes], args.rate, args.seconds))
