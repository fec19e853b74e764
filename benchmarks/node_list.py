"""`herd node list` wall time at N nodes, process start included (a real subprocess),
beside its limit measured in the same run: a minimal nats-py + msgspec client (a
subprocess too, importing nats-py without aiohttp as the CLI does) that sends the same
``node.list`` requests, follows the pages and prints the rows (table) or the objects
(json). Every node heartbeats once, so the live fields are filled. Figure and limit
alternate, ``--runs`` times each; medians and bests printed with the spread (max - min)
as the noise."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import nats
from nats.aio.client import Client as NATS

from benchmarks.common import machine, start_server, stop_server
from herdbook.agent.protocol import send_heartbeat
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeInfo, NodeRegistered
from herdbook.events.store import subject_of

TARGETS = {("table", 10_000): 0.3, ("json", 10_000): 0.3, ("json", 50_000): 1.2}

MINIMAL = r"""
import asyncio, sys, msgspec
sys.modules["aiohttp"] = None   # as the CLI: nats-py without its websocket transport
import nats
async def main(url, wide):
    nc = await nats.connect(url)
    items, token = [], None
    while True:
        req = {"wide": wide} if token is None else {"wide": wide, "next_token": token}
        msg = await nc.request("herd.api.v1.node.list", msgspec.json.encode(req), timeout=30)
        page = msgspec.json.decode(msg.data)["result"]
        items.extend(page["items"])
        token = page.get("next_token")
        if not token:
            break
    await nc.close()
    if wide:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(items), indent=2).decode())
    else:
        sys.stdout.write("\n".join(" ".join((i["id"], i["type"], i["approval"], i["state"]))
                                   for i in items))
asyncio.run(main(sys.argv[1], sys.argv[2] == "json"))
"""


async def fleet(nc: NATS, nodes: int) -> None:
    info = NodeInfo(hostname="h", arch="x86_64", cpus=64, labels={"zone": "a"})
    for i in range(nodes):
        event = NodeRegistered(node_id=f"node-{i:06d}", boot_id="b1", info=info)
        await nc.publish(subject_of(event), encode(event))
    await nc.flush()


async def heartbeats(nc: NATS, nodes: int) -> None:
    for i in range(nodes):
        await send_heartbeat(nc, Heartbeat(node_id=f"node-{i:06d}", boot_id="b1", seq=1,
                                           sent_at=time.time()))
    await nc.flush()


async def timed(command: list[str]) -> float:
    start = time.monotonic()
    result = await asyncio.to_thread(subprocess.run, command, capture_output=True)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    return elapsed


async def measure(nodes: int, outputs: list[str], runs: int) -> list[tuple[str, int, list[float],
                                                                            list[float]]]:
    server, tmp = start_server()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        await fleet(nc, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        try:
            assert plane.projector is not None and plane.sweeper is not None
            while len(plane.projector.nodes) < nodes:
                await asyncio.sleep(0.1)
            await heartbeats(nc, nodes)
            while sum(plane.sweeper.heartbeat_age(f"node-{i:06d}") is not None
                      for i in range(0, nodes, max(1, nodes // 50))) < min(nodes, 50):
                await asyncio.sleep(0.1)
            rows = []
            for output in outputs:
                herd = [sys.executable, "-m", "herdbook.cli", "--server", server.url, "node",
                        "list", "-o", output]
                limit = [sys.executable, "-c", MINIMAL, server.url, output]
                await timed(herd)           # warm the page cache and the server's
                figures, limits = [], []
                for _ in range(runs):
                    figures.append(await timed(herd))
                    limits.append(await timed(limit))
                rows.append((output, nodes, figures, limits))
            return rows
        finally:
            await plane.stop()
            await nc.close()
    finally:
        stop_server(server, tmp)


def show(rows: list[tuple[str, int, list[float], list[float]]], runs: int) -> None:
    print(f"herd node list, process start included ({machine()}; median and best of {runs}, "
          "noise = max - min)")
    print(f"{'output':<7} {'nodes':>7} {'herd':>8} {'best':>7} {'limit':>8} {'best':>7} "
          f"{'ratio':>6} {'µs/node':>8} {'noise':>7}  target")
    for output, nodes, figures, limits in rows:
        figure, limit = statistics.median(figures), statistics.median(limits)
        target = TARGETS.get((output, nodes))
        verdict = "" if target is None else (
            f"<= {target} s {'met' if figure <= target else 'MISSED'}")
        print(f"{output:<7} {nodes:>7} {figure:>7.3f}s {min(figures):>6.3f}s {limit:>7.3f}s "
              f"{min(limits):>6.3f}s {figure / limit:>6.2f} {figure / nodes * 1e6:>8.1f} "
              f"{max(figures) - min(figures):>6.3f}s  {verdict}")


async def main(sizes: list[int], outputs: list[str], runs: int) -> None:
    rows = []
    for nodes in sizes:
        rows += await measure(nodes, outputs, runs)
    show(rows, runs)
    print("reproduce: python -m benchmarks.node_list --sizes "
          f"{','.join(map(str, sizes))} --output {','.join(outputs)} --runs {runs}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10000",
                        help="Fleet sizes, comma-separated (e.g. 10000,50000).")
    parser.add_argument("--nodes", type=int, help="One fleet size (as --sizes N).")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", default="table,json", help="table, json or both.")
    args = parser.parse_args()
    chosen = [args.nodes] if args.nodes else [int(s) for s in args.sizes.split(",")]
    asyncio.run(main(chosen, args.output.split(","), args.runs))
