"""The web console at N nodes, measured in headless Chromium: the fleet page's load (from
navigation start to the grid of N cells drawn and painted, ``performance.now()``) and an
update's latency (from the event's ``at``, stamped by the control plane on this host's
clock, to its cell patched in the page). Each beside its limit in the same browser, run
for run: the page's floor is fetching and parsing ``/v1/fleet`` alone; an update's floor
is the event reaching the page over ``/v1/events``. Targets: 1 s each (issue 18).

A real control plane in this process (``bootstrap`` with its HTTP server), N nodes
registered straight into HERD_EVENTS and heartbeating once; updates are ``approve``
requests over HTTP, one node each. Deletes what it creates (/tmp/herd-bench-*).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import urllib.request
from typing import Any

import nats

from benchmarks.common import free_port, machine, start_server, stop_server
from benchmarks.node_list import fleet, heartbeats
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams

TARGET_MS = 1000.0
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def wait_js(driver: Any, script: str, timeout: float = 30.0) -> Any:
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(f"no answer to {script!r} in {timeout}s")


FLOOR = """const done = arguments[arguments.length - 1]; const t0 = performance.now();
fetch('/v1/fleet').then(r => r.json()).then(f => done([performance.now() - t0, f.rows.length]));"""


def approve(base: str, node: str) -> None:
    request = urllib.request.Request(f"{base}/v1/nodes/{node}/approve", method="POST",
                                     data=b'{"reason": "benchmark"}',
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        json.loads(reply.read())


def burst(driver: Any, base: str, nodes: list[str]) -> list[float]:
    """Approve ``nodes`` at once (16 requests in flight): each one's latency to its cell."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda node: approve(base, node), nodes))
    wanted = json.dumps(nodes)
    found = wait_js(driver, f"const want = new Set({wanted}); const got = herdConsole.updates"
                            ".filter(u => want.has(u.id)); return got.length >= want.size && got")
    return [u["latency_ms"] for u in found]


def one_run(driver: Any, base: str, nodes: int, run: int, updates: int) -> dict[str, list[float]]:
    """One navigation, its floor, then ``updates`` approvals seen in the page."""
    driver.get(f"{base}/?run={run}#/")
    wait_js(driver, f"return window.herdConsole?.fleetRows === {nodes} && herdConsole.fleetPaintedAt"
                    " && herdConsole.sseOpen")
    load = driver.execute_script("return herdConsole.fleetPaintedAt")
    floor, rows = driver.execute_async_script(FLOOR)
    assert rows == nodes, rows
    out: dict[str, list[float]] = {"load": [load], "load_floor": [floor], "update": [],
                                   "update_floor": []}
    for k in range(updates):
        node = f"node-{(run * updates + k) % nodes:06d}"
        approve(base, node)
        patched = wait_js(driver, f"return herdConsole.updates.find(u => u.id === '{node}')")
        out["update"].append(patched["latency_ms"])
        out["update_floor"].append(patched["sse_ms"])
    return out


async def measure(nodes: int, runs: int, updates: int,
                  burst_size: int) -> dict[str, list[float]]:
    server, tmp = start_server()
    port = free_port()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        await fleet(nc, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n"
                              f"http: {{port: {port}}}\nlifecycle: {{heartbeat_timeout: 1h}}\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        driver = None
        try:
            assert plane.projector is not None
            while len(plane.projector.nodes) < nodes:
                await asyncio.sleep(0.1)
            await heartbeats(nc, nodes)
            driver = await asyncio.to_thread(browser)
            base = f"http://127.0.0.1:{port}"
            total = plane.projector.nodes.__len__()     # the requester node counts too
            await asyncio.to_thread(one_run, driver, base, total, 0, 1)   # warm caches
            figures: dict[str, list[float]] = {}
            for run in range(1, runs + 1):
                result = await asyncio.to_thread(one_run, driver, base, total, run, updates)
                for key, values in result.items():
                    figures.setdefault(key, []).extend(values)
            if burst_size:
                first = nodes // 2
                figures["burst"] = await asyncio.to_thread(
                    burst, driver, base, [f"node-{first + k:06d}" for k in range(burst_size)])
            return figures
        finally:
            if driver is not None:
                await asyncio.to_thread(driver.quit)
            await plane.stop()
            await nc.close()
    finally:
        stop_server(server, tmp)


def show(nodes: int, runs: int, figures: dict[str, list[float]]) -> None:
    print(f"web console in headless Chromium, {nodes:,} nodes ({machine()}; {runs} runs, "
          "ms: median, best, worst)")
    for name, key, floor_name in (
            ("fleet page load (navigation -> grid painted)", "load", "fetch+parse /v1/fleet"),
            ("update latency (event at -> cell patched)", "update", "event at -> SSE in page")):
        values, floors = figures[key], figures[f"{key}_floor"]
        median = statistics.median(values)
        verdict = "met" if median < TARGET_MS else "MISSED"
        print(f"{name}: {median:.0f} ms (best {min(values):.0f}, worst {max(values):.0f})   "
              f"limit: {floor_name} {statistics.median(floors):.0f} ms (best {min(floors):.0f})   "
              f"target < {TARGET_MS:.0f} ms: {verdict}")
    if "burst" in figures:
        values = figures["burst"]
        print(f"burst of {len(values)} approvals (16 in flight), each event at -> its cell: "
              f"median {statistics.median(values):.0f} ms, worst {max(values):.0f} ms   "
              f"target < {TARGET_MS:.0f} ms: {'met' if max(values) < TARGET_MS else 'MISSED'}")


async def main(nodes: int, runs: int, updates: int, burst_size: int) -> None:
    figures = await measure(nodes, runs, updates, burst_size)
    show(nodes, runs, figures)
    print(f"reproduce: python -m benchmarks.console --nodes {nodes} --runs {runs} "
          f"--updates {updates} --burst {burst_size}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--updates", type=int, default=5, help="Updates timed per run.")
    parser.add_argument("--burst", type=int, default=500,
                        help="Then this many approvals at once (0: none).")
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.runs, args.updates, args.burst))
