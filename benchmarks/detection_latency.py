"""Dead node → DEGRADED latency at fleet scale.

A publisher process heartbeats --nodes nodes every --interval seconds; after a warm-up
it stops heartbeating --dead of them and keeps the others heartbeating for two timeouts
and a round more: a live node declared DEGRADED in that window is a false alarm. For each
dead node the latency is the time from its last heartbeat to the moment the
`node.degraded` event is seen on NATS. The target is heartbeat_timeout + 1 s.

``--sizes 10000,50000,100000`` runs each fleet size on a fresh server and prints a table:
detected, false alarms, latency over the timeout (p50, max), and the control plane's CPU
µs per heartbeat while the fleet heartbeats (this process, every thread): the detection
delay and the cost per heartbeat should stay flat as the fleet grows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import NamedTuple

import nats

from benchmarks.common import report, sizes_arg, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import subject_of


async def publish(url: str, nodes: int, dead: int, interval: float, kill_after: float,
                  watch: float) -> None:
    """Heartbeat all nodes every interval; after kill_after seconds, skip the dead ones and
    keep the live ones heartbeating for ``watch`` seconds more (so a live node wrongly
    declared is counted over that window, not over the few seconds before the last dead
    one is seen). Prints the wall time of each dead node's last heartbeat and the number
    of heartbeats sent, as JSON."""
    nc = await nats.connect(url)
    start = time.monotonic()
    last: dict[str, float] = {}
    seq = sent = 0
    while time.monotonic() - start < kill_after + watch:
        seq += 1
        round_start = time.monotonic()
        killing = round_start - start >= kill_after
        for i in range(nodes):
            node_id = f"n{i}"
            if killing and i < dead:
                continue
            await nc.publish(f"herd.hb.{node_id}", encode(Heartbeat(node_id=node_id, boot_id="b",
                                                                    seq=seq)))
            sent += 1
            if i < dead:
                last[node_id] = time.time()
            if i % 2000 == 0:
                await nc.flush()
                # spread the round over the interval
                target = round_start + interval * i / nodes
                if target > time.monotonic():
                    await asyncio.sleep(target - time.monotonic())
        await nc.flush()
        await asyncio.sleep(max(0.0, round_start + interval - time.monotonic()))
    print(json.dumps({"last": last, "sent": sent}))
    await nc.close()


class Row(NamedTuple):
    nodes: int
    detected: int
    dead: int
    false_alarms: int
    watched: float
    """Seconds the live nodes kept heartbeating after the kill (false alarms counted)."""
    p50: float
    worst: float
    plane_us: float
    """CPU µs of the control plane (this process) per heartbeat published."""


async def one_size(nodes: int, dead: int, timeout: float, interval: float) -> Row | None:
    server, tmp = start_server()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        for i in range(nodes):
            for event in (NodeRegistered(node_id=f"n{i}", boot_id="b"),
                          NodeBootChecked(node_id=f"n{i}", boot_id="b", passed=True)):
                await nc.publish(subject_of(event), encode(event))
            if i % 10_000 == 0:
                await nc.flush()
        await nc.flush()
        seen: dict[str, float] = {}

        async def on_degraded(msg) -> None:  # type: ignore[no-untyped-def]
            seen.setdefault(msg.subject.split(".")[2], time.time())

        await nc.subscribe("herd.node.*.degraded", cb=on_degraded)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n"
                              f"lifecycle: {{heartbeat_timeout: {timeout}s}}\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.projector is not None
        deadline = time.monotonic() + 120 + nodes / 1000
        while len(plane.projector.nodes) < nodes:
            if time.monotonic() > deadline:
                raise SystemExit(f"{nodes} nodes: the view holds {len(plane.projector.nodes)} "
                                 "nodes after the wait; the control plane is not folding")
            await asyncio.sleep(0.2)
        kill_after = 2 * interval
        # the live nodes heartbeat on for two timeouts after the kill (and a round more):
        # a sweeper that wrongly declares a live node has that long to do it
        watch = 2 * timeout + interval
        cpu = time.process_time()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.detection_latency", "--publish-only", server.url,
            "--nodes", str(nodes), "--dead", str(dead), "--interval", str(interval),
            "--kill-after", str(kill_after), "--watch", str(watch), stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        cpu = time.process_time() - cpu
        published = json.loads(out.decode().strip().splitlines()[-1])
        last, beats = published["last"], published["sent"]
        deadline = time.monotonic() + timeout + 10
        while len([n for n in last if n in seen]) < len(last) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        false_alarms = len([n for n in seen if n not in last])
        latencies = sorted(seen[n] - last[n] for n in last if n in seen)
        await plane.stop()
        await nc.close()
        if not latencies:
            print(f"{nodes} nodes: no dead node was detected")
            return None
        p50 = latencies[len(latencies) // 2]
        worst = latencies[-1]
        print(f"{nodes} nodes: {len(latencies)}/{len(last)} dead nodes detected; {false_alarms} "
              f"live nodes wrongly degraded while they heartbeated {watch:g}s after the kill "
              f"({watch / timeout:.1f} timeouts); latency p50 {p50:.2f}s, max {worst:.2f}s",
              flush=True)
        return Row(nodes, len(latencies), len(last), false_alarms, watch, p50, worst,
                   1e6 * cpu / beats)
    finally:
        stop_server(server, tmp)


async def main(sizes: list[int], dead: int, timeout: float, interval: float) -> None:
    rows = [await one_size(nodes, dead, timeout, interval) for nodes in sizes]
    print("\n| nodes | detected | false alarms (live nodes heartbeating after the kill) "
          "| p50 over timeout | max over timeout | control plane CPU µs/heartbeat |"
          "\n|---|---|---|---|---|---|")
    for row in rows:
        if row is not None:
            print(f"| {row.nodes:,} | {row.detected}/{row.dead} | {row.false_alarms} over "
                  f"{row.watched:g} s | "
                  f"+{row.p50 - timeout:.2f} s | +{row.worst - timeout:.2f} s | {row.plane_us:.1f} |")
    done = [row for row in rows if row is not None]
    if not done:
        raise SystemExit(1)
    worst = max(done, key=lambda row: row.worst)
    report(f"dead node -> DEGRADED at {', '.join(f'{row.nodes:,}' for row in done)} nodes",
           f"max {worst.worst:.2f}s = timeout {timeout:g}s + {worst.worst - timeout:.2f}s "
           f"({worst.nodes:,} nodes); {sum(row.detected for row in done)}/"
           f"{sum(row.dead for row in done)} detected; false alarms "
           f"{sum(row.false_alarms for row in done)} over {done[0].watched:g}s of live "
           f"heartbeats after each kill", f"<= heartbeat_timeout + 1s ({timeout + 1:g}s), "
           "0 false alarms",
           f"python -m benchmarks.detection_latency --sizes {','.join(map(str, sizes))} "
           f"--dead {dead} --timeout {timeout:g} --interval {interval:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000, help="one fleet size")
    parser.add_argument("--sizes", type=sizes_arg, help="several fleet sizes, e.g. 10000,50000,100000")
    parser.add_argument("--dead", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--interval", type=float, default=3.0)
    parser.add_argument("--publish-only", metavar="URL")
    parser.add_argument("--kill-after", type=float, default=6.0)
    parser.add_argument("--watch", type=float, default=21.0)
    args = parser.parse_args()
    if args.publish_only:
        asyncio.run(publish(args.publish_only, args.nodes, args.dead, args.interval,
                            args.kill_after, args.watch))
    else:
        if min(args.nodes, args.dead) < 1 or args.timeout <= 0 or args.interval <= 0:
            parser.error("--nodes, --dead, --timeout and --interval must be positive")
        asyncio.run(main(args.sizes or [args.nodes], args.dead, args.timeout, args.interval))
