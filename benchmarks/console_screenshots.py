"""Every screenshot of docs/console.md (``SHOTS``), taken from a 1,000-node demo fleet:
starts ``herd up --demo 1000 --auto-approve`` in a temporary data dir (1,000 in-process
agents with 8 fake GPUs each, racks r0..r3), sets a scene with the real CLI (two nodes
of rack r3 drained and two cordoned, ``thermal 95`` on one GPU, an XID 79 on the node
running a training job, a job that fits nowhere, a finished job that printed output),
then drives headless Chromium at a 1280x720 viewport through the pages and writes each
PNG. Not run by the test suite (READY takes ~100 s on the 2-core VM); the browser tests
check the pages themselves, tests/browser/test_console_files.py that ``SHOTS`` and the
docs name the same files.

    python -m benchmarks.console_screenshots            # writes docs/console-*.png
    python -m benchmarks.console_screenshots --nodes 40 --out /tmp/shots   # a quick look

Deletes what it creates (the data dir, the processes it started, the jobs' workloads).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import free_port
from benchmarks.console import browser, wait_js

SHOTS = ("console-fleet-table.png", "console-fleet-map.png", "console-node.png",
         "console-gpu-cards.png", "console-history.png", "console-job.png",
         "console-job-logs.png", "console-fleet-bulk.png")
HERD = [sys.executable, "-m", "herdbook.cli"]
WIDTH, HEIGHT = 1280, 720
HOT, RACK = "demo-020", "r3"
DRAINED, CORDONED = ("demo-003", "demo-007"), ("demo-011", "demo-015")
JOBS = {
    "train": """id: train\ncount: 1\ncommand: ["sleep", "3600"]\n"""
             """resources: {cpu: 1, memory_mb: 64, gpus: 8}\n"""
             """requeue: {policy: on_node_failure, max_requeue: 3}\n""",
    "too-big": """id: too-big\ncount: 1\ncommand: ["sleep", "300"]\n"""
               """resources: {cpu: 1, memory_mb: 64, gpus: 64}\n""",
    "eval-sweep": """id: eval-sweep\ncount: 1\n"""
                  """command: ["sh", "-c", "for i in $(seq 1 400); do """
                  """echo step $i loss 0.$((1000 - i)); done"]\n"""
                  """resources: {cpu: 0.1, memory_mb: 16, gpus: 0}\nrequeue: {policy: never}\n""",
}


def herd(server: str, *args: str) -> str:
    result = subprocess.run([*HERD, "--server", server, *args], capture_output=True, text=True,
                            timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"herd {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(f"{base}{path}", timeout=30) as reply:
        return json.loads(reply.read())


def until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(1)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def ready_count(base: str) -> int:
    fleet = get(base, "/v1/fleet")
    node, state = fleet["columns"].index("id"), fleet["columns"].index("state")
    return sum(1 for row in fleet["rows"] if row[node].startswith("demo-") and row[state] == "READY")


def allocs(server: str, job: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(herd(server, "alloc", "list", "--job", job,
                                                  "-o", "json"))
    return found


def scene(server: str, base: str, tmp: Path) -> str:
    """The fleet as the shots show it; returns the node the XID 79 took down."""
    for node in DRAINED:
        herd(server, "node", "drain", node, "-m", "disk replacement")
    for node in CORDONED:
        herd(server, "node", "cordon", node, "-m", "cable check")
    for name, spec in JOBS.items():
        (tmp / f"{name}.yaml").write_text(spec)
        herd(server, "job", "run", str(tmp / f"{name}.yaml"))
    hit = until("train running", lambda: next((a["node_id"] for a in allocs(server, "train")
                                               if a["status"] == "running"), None), 60)
    herd(server, "agent", "inject", "--node", HOT, "thermal", "95", "--gpu", "1")
    herd(server, "agent", "inject", "--node", hit, "xid", "79", "--gpu", "3")
    until("train placed again", lambda: any(a["status"] == "running" and a["node_id"] != hit
                                            for a in allocs(server, "train")), 90)
    until("eval-sweep complete", lambda: any(a["status"] == "complete"
                                             for a in allocs(server, "eval-sweep")), 60)
    return str(hit)


def shoot(driver: Any, out: Path, name: str, scroll_to: str | None = None) -> None:
    if scroll_to:
        driver.execute_script("document.querySelector(arguments[0]).scrollIntoView()", scroll_to)
    else:
        driver.execute_script("window.scrollTo(0, 0)")
    time.sleep(0.5)                                   # a frame or two after the scroll
    driver.save_screenshot(str(out / name))
    print(f"wrote {out / name}")


def pages(driver: Any, base: str, out: Path, hit: str) -> None:
    def go(route: str, ready: str, timeout: float = 60.0) -> None:
        driver.get(f"{base}/#/{route}")
        wait_js(driver, ready, timeout)

    fleet = "return window.herdConsole?.fleetPaintedAt && herdConsole.sseOpen"
    go("?sort=temp&desc=1", f"{fleet} && document.querySelector('#fbody tr[data-id]')"
                            f"?.dataset.id === '{HOT}'")
    shoot(driver, out, "console-fleet-table.png")
    go("?view=map&zoom=2", f"{fleet} && document.querySelectorAll('#map section.group')"
                           ".length >= 4")
    shoot(driver, out, "console-fleet-map.png")
    go(f"node/{hit}", "const t = document.querySelector('#chains')?.textContent || '';"
                      "return t.includes('XID 79') && t.includes('alloc.placed')")
    shoot(driver, out, "console-node.png")
    go(f"node/{HOT}", "return document.querySelector(\".gpu-card[data-gpu='1']\")"
                      "?.dataset.temp === '95' && window.herdCharts?.['gpu-temperature_c']")
    shoot(driver, out, "console-gpu-cards.png", "#gpus")
    go("history?window=15m", "return document.querySelector(\"#marks tr[data-kind=detection]\")")
    shoot(driver, out, "console-history.png")
    go("job/too-big", "return document.querySelector('#why')?.textContent"
                      ".includes('resources exhausted')")
    shoot(driver, out, "console-job.png")
    go("job/eval-sweep", "return document.querySelector('#job-allocs button[data-logs]')")
    driver.find_element("css selector", "#job-allocs button[data-logs]").click()
    wait_js(driver, "return document.querySelector('#alloc-logs')?.dataset.state === 'shown'")
    shoot(driver, out, "console-job-logs.png", "#job-allocs")
    # last: the bulk cordon changes the fleet the other shots show
    go("?view=map", f"{fleet} && document.querySelector('input[data-group-sel={RACK}]')")
    driver.find_element("css selector", f"input[data-group-sel={RACK}]").click()
    driver.find_element("id", "bulk-reason").send_keys(f"rack {RACK} PDU swap")
    driver.find_element("css selector", "[data-bulk=cordon]").click()
    driver.find_element("id", "confirm-ok").click()
    wait_js(driver, "return document.querySelector('.results')?.dataset.done === 'true'", 120)
    shoot(driver, out, "console-fleet-bulk.png")


def stop(proc: subprocess.Popen[bytes], server: str) -> None:
    for job in JOBS:
        subprocess.run([*HERD, "--server", server, "job", "stop", job], capture_output=True,
                       timeout=60, check=False)
    proc.terminate()
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main(nodes: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="herd-shots-"))
    nats_port, http_port = free_port(), free_port()
    server, base = f"nats://127.0.0.1:{nats_port}", f"http://127.0.0.1:{http_port}"
    (tmp / "herd.yaml").write_text("scheduler: {unblock_delay: 100ms}\n")
    started = time.monotonic()
    with (tmp / "up.log").open("wb") as log:
        proc = subprocess.Popen([*HERD, "up", "-c", str(tmp / "herd.yaml"), "--demo", str(nodes),
                                 "--auto-approve", "--data-dir", str(tmp / "data"),
                                 "--nats-port", str(nats_port), "--http-port", str(http_port),
                                 "--node-id", "cp-1"], stdout=log, stderr=subprocess.STDOUT)
    driver = None
    try:
        until(f"{nodes} demo nodes READY", lambda: ready_count(base) >= nodes, 900)
        print(f"{nodes} nodes READY after {time.monotonic() - started:.0f} s")
        hit = scene(server, base, tmp)
        driver = browser()
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False})
        pages(driver, base, out, hit)
    except Exception:
        print((tmp / "up.log").read_text()[-4000:], file=sys.stderr)
        raise
    finally:
        if driver is not None:
            driver.quit()
        stop(proc, server)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "docs")
    args = parser.parse_args()
    main(args.nodes, args.out)
