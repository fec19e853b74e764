"""Headless Chromium for the console's benchmarks (``benchmarks.console_fleet``: the fleet
table and map at 10,000 nodes; ``benchmarks.console_screenshots``: the docs' pictures):
the browser, a wait on the page's JavaScript, and approvals over HTTP whose events the
page shows. The old grid page this module once measured on its own is gone: its table
and map are ``console_fleet``'s, with the same floors (fetch+parse ``/v1/fleet``, an
event reaching the page over ``/v1/events``)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

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
