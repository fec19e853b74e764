"""Liveness shards: each replica's heartbeat rate and CPU, one replica beside two.

The same fleet of lightweight nodes (``herdbook.sim.replicas``), on a nats-server that
maps the heartbeats onto --shards shards, first with one `herd up` replica holding every
shard, then with --replicas sharing them; each replica's accepted heartbeats per second
(its /metrics) and CPU seconds per second (/proc) over --seconds, in the same run. The
two-replica run ends with the SIGKILL handover of `herd sim --replicas`: the survivor
takes the shards after the lease and the watch, with no false alarm.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from benchmarks.common import machine, report
from herdbook.sim.replicas import ReplicaOptions, ReplicaReport, run_replicas


async def main(nodes: int, replicas: int, shards: int, timeout: float, seconds: float) -> None:
    results: list[ReplicaReport] = []
    for count in (1, replicas):
        work = Path(tempfile.mkdtemp(prefix="herd-bench-shards-"))
        try:
            print(f"--- {count} replica{'s' if count > 1 else ''}", flush=True)
            results.append(await run_replicas(ReplicaOptions(
                nodes=nodes, replicas=count, shards=shards, heartbeat_timeout=timeout,
                measure=seconds, kill=count > 1), work,
                lambda text: print(f"  {text}", flush=True)))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    offered = nodes / (timeout / 3)
    print(f"\n{nodes:,} nodes, a heartbeat every {timeout / 3:.2f}s ({offered:,.0f}/s offered), "
          f"{shards} shards; {machine()}")
    print("\n| run | replica | shards | heartbeats/s | share | CPU s/s | CPU µs/heartbeat "
          "| shards retaken |\n|---|---|---|---|---|---|---|---|")
    for result in results:
        total = sum(f.heartbeats_per_s for f in result.replicas) or 1.0
        run = f"{len(result.replicas)} replica{'s' if len(result.replicas) > 1 else ''}"
        for f in result.replicas:
            print(f"| {run} | {f.name} | {','.join(map(str, f.shards))} | "
                  f"{f.heartbeats_per_s:,.0f} | {f.heartbeats_per_s / total:.0%} | "
                  f"{f.cpu_per_s:.2f} | {f.us_per_heartbeat:.1f} | {f.retaken} |")
    kill = results[-1].kill
    if kill is not None:
        print(f"\nkill -9 {kill.killed}: shards {kill.shards_taken_over} taken over after "
              f"{kill.takeover_s:.1f}s; {kill.declared}/{kill.doomed} stopped nodes declared, "
              f"the last {kill.latest_declared_s:.1f}s after the kill (bound {kill.bound_s:.1f}s);"
              f" false alarms {len(kill.false_alarms)} {kill.false_alarms[:3]}")
    one = results[0].replicas[0]
    busiest = max(results[-1].replicas, key=lambda f: f.cpu_per_s)
    report("liveness shards", f"busiest of {replicas} replicas {busiest.cpu_per_s:.2f} CPU s/s "
           f"against {one.cpu_per_s:.2f} for one ({nodes:,} nodes)",
           "each replica about 1/R of one replica's work",
           f"python -m benchmarks.liveness_shards --nodes {nodes} --replicas {replicas} "
           f"--shards {shards} --timeout {timeout:g} --seconds {seconds:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="heartbeat timeout; the nodes beat every third of it")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.nodes < 1 or args.replicas < 2 or args.shards < args.replicas:
        parser.error("--nodes >= 1, --replicas >= 2, --shards >= --replicas")
    asyncio.run(main(args.nodes, args.replicas, args.shards, args.timeout, args.seconds))
