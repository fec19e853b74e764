"""Fleet reads per node at growing fleets (issue 32 item 3): ``/v1/fleet`` and ``herd node
list -o json`` must cost the same CPU time per node at 1k, 10k and 100k nodes (within
1.5x), each printed beside the same run's encode-only floor (msgspec encoding the same
rows, nothing else).

A real control plane in this process, N nodes x 8 GPUs registered straight into
HERD_EVENTS with one heartbeat and one telemetry sample each (``console_fleet``'s fleet).
Measured in-process with ``time.process_time`` (CPU time is steadier than wall time on a
shared machine), garbage collection on, as the server runs:

- fleet: ``WebServer.fleet()`` plus the JSON encoding ``json_response`` does, once with
  the view unchanged since the last request ("warm") and once after one event folded
  between requests ("event": what a live fleet sees, a node approved);
- node list: every page of the ``node.list`` handler (``wide``, as ``-o json`` asks) and
  what the CLI does per page (decode to raw items, ``json_items``), after one event;
- floors: ``msgspec.json.encode`` of the same reply's rows / the same decoded objects.

Paging stays for 1M: ``node.list`` is paged by ``next_token`` (``MAX_PAGE_ITEMS``).
Everything created (the server's store) is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS

from benchmarks.common import free_port, machine, sizes_arg, start_server, stop_server
from benchmarks.console_fleet import GPUS, fill, name
from herdbook.agent.protocol import send_heartbeat
from herdbook.api.messages import ListNodes, Page
from herdbook.cli.output import json_items
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.subjects import telemetry_subject
from herdbook.events.telemetry import GpuReading, GpuTelemetry

BATCH = 2000
LIMIT = 1.5
"""The largest per-node cost over the smallest fleet's that still counts as linear."""

_page = msgspec.json.Decoder(Page[msgspec.Raw])


async def samples(nc: NATS, count: int, first: int) -> None:
    """One heartbeat and one telemetry sample (8 GPUs) for nodes ``first..first+count``."""
    rng = random.Random(first)
    for i in range(first, first + count):
        await send_heartbeat(nc, Heartbeat(node_id=name(i), boot_id="b1", seq=1,
                                           sent_at=time.time()))
        sample = GpuTelemetry(node_id=name(i), boot_id="b1", sampled_at=time.time(), gpus=tuple(
            GpuReading(index=g, uuid=f"GPU-{i}-{g}", temperature_c=float(rng.randint(30, 90)),
                       gpu_util_pct=float(rng.randint(0, 100))) for g in range(GPUS)))
        await nc.publish(telemetry_subject(name(i)), encode(sample))
    await nc.flush()


def reply_json(web: Any) -> bytes:
    """``/v1/fleet``'s body as ``_fleet_reply`` sends it (bytes, or a dict it encodes)."""
    body = web.fleet()
    return body if isinstance(body, bytes) else msgspec.json.encode(body)


def floor(rows: Any) -> float:
    """CPU seconds msgspec takes to encode ``rows``: the floor of any JSON reply of them."""
    return cpu(lambda: msgspec.json.encode(rows))[0]


def cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


async def acpu(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.process_time()
    out = await fn()
    return time.process_time() - start, out


async def list_all(handler: Callable[[bytes], Awaitable[Any]]) -> list[bytes]:
    """Every page of ``node.list`` (wide) as the CLI's ``-o json`` handles them."""
    chunks, token = [], None
    while True:
        raw = await handler(msgspec.json.encode(ListNodes(wide=True, next_token=token)))
        page = _page.decode(raw)
        chunks.append(json_items(page.items))
        token = page.next_token
        if not token:
            return chunks


async def measure(nodes: int, runs: int) -> dict[str, list[float]]:
    """Seconds of CPU per request (per listing) for each figure and floor."""
    server, tmp = start_server()
    print(f"{nodes} nodes: working in {tmp}", flush=True)
    out: dict[str, list[float]] = {k: [] for k in (
        "fleet_warm", "fleet_event", "fleet_floor", "list", "list_floor")}
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        await fill(nc, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n"
                              f"http: {{host: 127.0.0.1, port: {free_port()}}}\n"
                              # a starved event loop must not lose the lease nor the
                              # nodes go DOWN while 100k are filled: events would churn
                              "lifecycle: {heartbeat_timeout: 1h}\nleader_ttl: 120s\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        try:
            assert plane.projector is not None and plane.web is not None
            assert plane.api is not None
            while len(plane.projector.nodes) < nodes:
                await asyncio.sleep(0.1)
            telemetry = plane.api.gpus.telemetry
            for start in range(0, nodes, BATCH):    # paced: a burst of 100k samples would
                await samples(nc, min(BATCH, nodes - start), start)   # be a slow consumer
                while telemetry.of(name(min(nodes, start + BATCH) - 1)) is None:
                    await asyncio.sleep(0.05)
            web, routes = plane.web, plane.api.routes
            json = msgspec.json.encode
            reply_json(web)                               # the first build: not measured
            await list_all(routes["node.list"])
            for run in range(runs):
                seconds, body = cpu(lambda: reply_json(web))
                out["fleet_warm"].append(seconds)
                await routes["node.approve"](json({"id": name(2 * run % nodes)}))
                seconds, body = cpu(lambda: reply_json(web))
                out["fleet_event"].append(seconds)
                out["fleet_floor"].append(floor(msgspec.json.decode(body)))
                await routes["node.approve"](json({"id": name((2 * run + 1) % nodes)}))
                seconds, chunks = await acpu(lambda: list_all(routes["node.list"]))
                out["list"].append(seconds)
                objects = msgspec.json.decode(b"[" + b",".join(chunks) + b"]")
                assert len(objects) == len(plane.projector.nodes), len(objects)
                out["list_floor"].append(floor(objects))
                del objects, chunks, body
        finally:
            await plane.stop()
            await nc.close()
    finally:
        stop_server(server, tmp)
    return out


def per_node(values: list[float], nodes: int, pick: Callable[[list[float]], float] = min) -> float:
    return pick(values) / nodes * 1e6


def show(results: dict[int, dict[str, list[float]]], runs: int) -> bool:
    """Print each figure per node beside its floor; True when every figure is linear.
    The verdict compares bests: on a shared machine another job only ever adds CPU time
    (cache evictions, frequency), so the best of the runs is the figure's own cost."""
    print(f"fleet reads, CPU µs per node, best and median of {runs} ({machine()})")
    print(f"{'read':<12} {'nodes':>7} {'µs/node':>8} {'median':>7} {'floor':>7} {'x floor':>8} "
          f"{'x smallest':>10}  limit")
    smallest = min(results)
    ok = True
    for figure, floor in (("fleet_warm", "fleet_floor"), ("fleet_event", "fleet_floor"),
                          ("list", "list_floor")):
        base = per_node(results[smallest][figure], smallest)
        for nodes in sorted(results):
            value = per_node(results[nodes][figure], nodes)
            middle = per_node(results[nodes][figure], nodes, statistics.median)
            low = per_node(results[nodes][floor], nodes)
            growth = value / base
            verdict = "met" if growth <= LIMIT else "MISSED"
            ok = ok and growth <= LIMIT
            print(f"{figure:<12} {nodes:>7} {value:>8.2f} {middle:>7.2f} {low:>7.2f} "
                  f"{value / low:>8.2f} {growth:>10.2f}  <= {LIMIT} {verdict}")
    return ok


async def main(sizes: list[int], runs: int) -> bool:
    results = {}
    for nodes in sizes:
        results[nodes] = await measure(nodes, runs)
    ok = show(results, runs)
    print(f"reproduce: python -m benchmarks.fleet_reads --sizes {','.join(map(str, sizes))} "
          f"--runs {runs}")
    return ok


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=sizes_arg, default=[1000, 10_000, 100_000],
                        help="Fleet sizes, comma-separated (default 1000,10000,100000).")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    raise SystemExit(0 if asyncio.run(main(args.sizes, args.runs)) else 1)
