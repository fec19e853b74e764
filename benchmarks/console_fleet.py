"""The console's fleet table at N nodes x 8 GPUs in headless Chromium (issue 28 item 6),
each figure beside the same run's floor, fetching and parsing ``/v1/fleet`` in the same
page:

- first paint: navigation start -> the table drawn and a frame painted;
- sort: a click on a column header -> the re-sorted table painted (the GPU temperature
  column: numbers, nulls last), and a plain JS sort of the same N keys;
- live update: an approval's event ``at`` (stamped by the control plane, same host) ->
  its row applied in the page; floor: the event reaching the page over SSE;
- memory: the page's JS heap after a forced GC (CDP ``Performance.getMetrics``) beside a
  blank page holding the parsed ``/v1/fleet`` reply;
- the map (``#/?view=map``, grouped by rack): navigation start -> every node's square
  drawn and a frame painted, and an approval's event -> its square patched, beside the
  same floors.

A real control plane in this process with its HTTP server; N nodes registered straight
into HERD_EVENTS with 8 GPUs each, one heartbeat each and one telemetry sample each
(``herd.gpu.<node>``, random temperatures), so the GPU columns hold numbers. Targets:
paint <= 1 s, sort <= 200 ms, update <= 200 ms (the map's too).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import nats
from nats.aio.client import Client as NATS

from benchmarks.common import free_port, machine, start_server, stop_server
from benchmarks.console import approve, browser, burst, wait_js
from herdbook.agent.protocol import send_heartbeat
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import GpuInfo, NodeInfo, NodeRegistered
from herdbook.events.store import subject_of
from herdbook.events.subjects import telemetry_subject
from herdbook.events.telemetry import GpuReading, GpuTelemetry

TARGETS = {"paint": 1000.0, "sort": 200.0, "update": 200.0, "map_paint": 1000.0,
           "map_update": 200.0, "burst": 1000.0}
GPUS = 8
FLOOR = """const done = arguments[arguments.length - 1]; const t0 = performance.now();
fetch('/v1/fleet').then(r => r.json()).then(f => { window.held = f;
  done([performance.now() - t0, f.rows.length]); });"""
SORT = """const done = arguments[arguments.length - 1]; const t0 = performance.now();
document.querySelector(`[data-sort=${arguments[0]}]`).click();
requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));"""
def name(i: int) -> str:
    return f"node-{i:06d}"


async def fill(nc: NATS, nodes: int) -> None:
    for i in range(nodes):
        info = NodeInfo(hostname=f"h{i}", arch="x86_64", cpus=64,
                        labels={"rack": f"r{i // 40:03d}", "zone": "abcd"[i % 4]},
                        gpus=tuple(GpuInfo(index=g, uuid=f"GPU-{i}-{g}", name="NVIDIA H100")
                                   for g in range(GPUS)))
        event = NodeRegistered(node_id=name(i), boot_id="b1", info=info)
        await nc.publish(subject_of(event), encode(event))
    await nc.flush()


async def samples(nc: NATS, nodes: int) -> None:
    rng = random.Random(8)
    for i in range(nodes):
        await send_heartbeat(nc, Heartbeat(node_id=name(i), boot_id="b1", seq=1,
                                           sent_at=time.time()))
        sample = GpuTelemetry(node_id=name(i), boot_id="b1", sampled_at=time.time(), gpus=tuple(
            GpuReading(index=g, uuid=f"GPU-{i}-{g}", temperature_c=float(rng.randint(30, 90)),
                       gpu_util_pct=float(rng.randint(0, 100))) for g in range(GPUS)))
        await nc.publish(telemetry_subject(name(i)), encode(sample))
    await nc.flush()


def heap(driver: Any) -> float:
    """The page's JS heap after a GC, MB."""
    driver.execute_cdp_cmd("Performance.enable", {})     # per page: getMetrics is empty before
    driver.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
    used = [m["value"] for m in metrics if m["name"] == "JSHeapUsedSize"]
    if not used:
        raise RuntimeError("Chromium gave no JSHeapUsedSize metric")
    return float(used[0]) / 2**20


def one_run(driver: Any, base: str, total: int, run: int, updates: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in (
        "paint", "floor", "sort", "raw_sort", "update", "update_floor", "heap", "heap_floor",
        "map_paint", "map_update", "map_update_floor", "map_heap")}
    # the floor first, in a page without the console: fetch+parse, and its heap
    driver.get(f"{base}/openapi.json?run={run}")
    floor, rows = driver.execute_async_script(FLOOR)
    assert rows == total, rows
    out["floor"].append(floor)
    out["heap_floor"].append(heap(driver))
    driver.get(f"{base}/?run={run}#/")
    wait_js(driver, f"return window.herdConsole?.fleetRows === {total} && herdConsole.fleetPaintedAt"
                    " && herdConsole.sseOpen")
    out["paint"].append(driver.execute_script("return herdConsole.fleetPaintedAt"))
    for column in ("temp", "util", "id"):
        out["sort"].append(driver.execute_async_script(SORT, column))
    out["raw_sort"].append(raw_sort(driver))
    for k in range(updates):
        node = name((run * updates + k) % (total - 1))
        approve(base, node)
        patched = wait_js(driver, f"return herdConsole.updates.find(u => u.id === '{node}')")
        out["update"].append(patched["latency_ms"])
        out["update_floor"].append(patched["sse_ms"])
    out["heap"].append(heap(driver))
    # the map: every node a square in its rack's block, live the same way
    driver.get(f"{base}/?run={run}&map=1#/?view=map")      # a new document, not a hash change
    wait_js(driver, f"return window.herdConsole?.fleetRows === {total} && herdConsole.fleetPaintedAt"
                    f" && herdConsole.sseOpen && document.querySelectorAll('#map .cell[data-id]')"
                    f".length === {total}")
    out["map_paint"].append(driver.execute_script("return herdConsole.fleetPaintedAt"))
    for k in range(updates):
        node = name((total // 2 + run * updates + k) % (total - 1))
        approve(base, node)
        patched = wait_js(driver, f"return herdConsole.updates.find(u => u.id === '{node}')"
                                  f" && document.querySelector(\"#map .cell[data-id='{node}']\")"
                                  f".dataset.state !== 'UNKNOWN' && herdConsole.updates.find("
                                  f"u => u.id === '{node}')")
        out["map_update"].append(patched["latency_ms"])
        out["map_update_floor"].append(patched["sse_ms"])
    out["map_heap"].append(heap(driver))
    return out


def raw_sort(driver: Any) -> float:
    """Sorting N random numbers with a key array in this page: what any sort costs."""
    ms: float = driver.execute_script("""const n = herdConsole.fleetRows;
        const keys = Array.from({length: n}, () => Math.random() * 100);
        const t0 = performance.now();
        Array.from(keys.keys()).sort((a, b) => keys[a] - keys[b]);
        return performance.now() - t0;""")
    return ms


async def measure(nodes: int, runs: int, updates: int, burst_size: int) -> dict[str, list[float]]:
    server, tmp = start_server()
    port = free_port()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        await fill(nc, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n"
                              f"http: {{port: {port}}}\nlifecycle: {{heartbeat_timeout: 1h}}\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        driver = None
        try:
            assert plane.projector is not None
            while len(plane.projector.nodes) < nodes:
                await asyncio.sleep(0.1)
            await samples(nc, nodes)
            await asyncio.sleep(2)                      # the intake takes the samples
            driver = await asyncio.to_thread(browser)
            base = f"http://127.0.0.1:{port}"
            total = len(plane.projector.nodes)          # the requester node counts too
            await asyncio.to_thread(one_run, driver, base, total, 0, 1)   # warm caches
            figures: dict[str, list[float]] = {}
            for run in range(1, runs + 1):
                result = await asyncio.to_thread(one_run, driver, base, total, run, updates)
                for key, values in result.items():
                    figures.setdefault(key, []).extend(values)
            if burst_size:                   # approvals at once, on the table: each to its row
                await asyncio.to_thread(driver.get, f"{base}/?burst=1#/")
                await asyncio.to_thread(wait_js, driver, "return window.herdConsole?."
                                        "fleetPaintedAt && herdConsole.sseOpen")
                first = 3 * total // 4
                figures["burst"] = await asyncio.to_thread(
                    burst, driver, base, [name(first + k) for k in range(burst_size)])
            return figures
        finally:
            if driver is not None:
                await asyncio.to_thread(driver.quit)
            await plane.stop()
            await nc.close()
    finally:
        stop_server(server, tmp)


def show(nodes: int, runs: int, figures: dict[str, list[float]]) -> None:
    print(f"console fleet table and map in headless Chromium, {nodes:,} nodes x {GPUS} GPUs "
          f"({machine()}; {runs} runs; ms: median, best, worst)")
    floor = statistics.median(figures["floor"])
    fetch = f"fetch+parse /v1/fleet {floor:.0f} ms"
    for label, key, floor_text in (
            ("first paint (navigation -> table painted)", "paint", fetch),
            ("sort (header click -> painted; temp, util, id)", "sort",
             f"{fetch}; a bare sort of N keys {statistics.median(figures['raw_sort']):.1f} ms"),
            ("live update (event at -> row applied)", "update",
             f"event at -> SSE in page {statistics.median(figures['update_floor']):.0f} ms"),
            ("map paint (navigation -> every square painted)", "map_paint", fetch),
            ("map live update (event at -> square patched)", "map_update",
             f"event at -> SSE in page {statistics.median(figures['map_update_floor']):.0f} ms")):
        values = figures[key]
        median = statistics.median(values)
        verdict = "met" if median <= TARGETS[key] else "MISSED"
        print(f"{label}: {median:.0f} ms (best {min(values):.0f}, worst {max(values):.0f})   "
              f"floor: {floor_text}   target <= {TARGETS[key]:.0f} ms: {verdict}")
    if figures.get("burst"):
        values = figures["burst"]
        print(f"{len(values)} approvals at once, each event at -> its row applied: median "
              f"{statistics.median(values):.0f} ms, worst {max(values):.0f} ms   "
              f"target <= {TARGETS['burst']:.0f} ms: "
              f"{'met' if max(values) <= TARGETS['burst'] else 'MISSED'} (worst)")
    print(f"page JS heap after GC: table {statistics.median(figures['heap']):.1f} MB, map "
          f"{statistics.median(figures['map_heap']):.1f} MB   floor: a blank page holding the "
          f"parsed /v1/fleet {statistics.median(figures['heap_floor']):.1f} MB")


def ring_memory(nodes: int) -> None:
    """The telemetry ring's memory at N nodes x 8 GPUs (reactors/telemetry_ring.py):
    what the process allocated for it (tracemalloc, every tier wrapped on one node, one
    sample on the others: the arrays are fixed at a node's first sample) beside the
    arrays' own bytes (the floor)."""
    import tracemalloc

    from herdbook.reactors.telemetry_ring import TelemetryRing

    def one(i: int) -> GpuTelemetry:
        return GpuTelemetry(node_id=name(i), boot_id="b1", gpus=tuple(
            GpuReading(index=g, temperature_c=60.0, power_w=500.0, gpu_util_pct=90.0)
            for g in range(GPUS)))

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ring = TelemetryRing()
    samples = [one(i) for i in range(nodes)]
    held = tracemalloc.get_traced_memory()[0]
    for i, sample in enumerate(samples):
        ring.add(sample, 1_800_000_000 + i % 15)
    for k in range(8 * 24 * 60):                     # node 0: 8 days of minutes
        ring.add(samples[0], 1_800_000_000 + 60 * k)
    used = tracemalloc.get_traced_memory()[0] - held
    tracemalloc.stop()
    started = time.process_time()
    for k in range(4 * 24 * 60):                     # an add's CPU, untraced: 1 day at 15 s
        ring.add(samples[1], 1_800_000_000 + 15 * k)
    per_add = (time.process_time() - started) / (4 * 24 * 60) * 1e6
    arrays = ring.nbytes()
    print(f"telemetry ring, {nodes:,} nodes x {GPUS} GPUs: {used / nodes:,.0f} B/node allocated "
          f"({used / 2**20:,.0f} MiB; tracemalloc)   floor: the arrays {arrays / nodes:,.0f} "
          f"B/node ({arrays / 2**20:,.0f} MiB); the samples themselves "
          f"{(held - before) / 2**20:,.0f} MiB, not counted; an add every 15 s: {per_add:.1f} µs CPU")


async def main(nodes: int, runs: int, updates: int, burst_size: int, ring_only: bool) -> None:
    ring_memory(nodes)
    print(f"reproduce: python -m benchmarks.console_fleet --nodes {nodes} --ring")
    if ring_only:
        return
    figures = await measure(nodes, runs, updates, burst_size)
    show(nodes, runs, figures)
    print(f"reproduce: python -m benchmarks.console_fleet --nodes {nodes} --runs {runs} "
          f"--updates {updates}" + (f" --burst {burst_size}" if burst_size else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--updates", type=int, default=5, help="Updates timed per run.")
    parser.add_argument("--burst", type=int, default=0,
                        help="Also approve this many nodes at once and time each to its row.")
    parser.add_argument("--ring", action="store_true",
                        help="Only the telemetry ring's memory (no browser).")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.runs, args.updates, args.burst, args.ring))
