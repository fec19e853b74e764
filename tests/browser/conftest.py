"""The console in a real browser: headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) against a real `herd up --http-port` with real
`herd agent`s, one fleet shared by the module. Skipped, with the reason printed, where
Chromium, its driver or selenium is missing.

The screenshots in docs/ are not the tests': benchmarks/console_screenshots.py takes them
from a 1,000-node demo fleet.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import JOBS_CONFIG, Fleet

CHROMIUM = os.environ.get("HERD_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("HERD_CHROMEDRIVER", "/usr/bin/chromedriver")

JOB = """\
id: web-train
count: 1
command: ["sleep", "300"]
resources: {cpu: 0.01, memory_mb: 1, gpus: 1}
requeue: {policy: on_node_failure, max_requeue: 3}
"""


def missing_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) or shutil.which(path)):
            return f"{path} is missing (apt-get install chromium chromium-driver; .ci/run does)"
    return None


class Console:
    """A real `herd up` with its HTTP server and console, real agents, one browser."""

    def __init__(self, fleet: Fleet, http_port: int, driver: Any) -> None:
        self.fleet = fleet
        self.base = f"http://127.0.0.1:{http_port}"
        self.driver = driver

    def open(self, route: str = "") -> None:
        self.driver.get(f"{self.base}/#/{route}")

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_js(self, script: str, *args: Any, timeout: float = 20.0, what: str = "") -> Any:
        return wait_until(lambda: self.js(script, *args), timeout=timeout, interval=0.05,
                          what=what or script)

    def wait_fleet(self) -> None:
        self.wait_js("return window.herdConsole && window.herdConsole.fleetRenderedAt",
                     what="the fleet page")
        self.wait_js("return window.herdConsole.sseOpen", what="the live stream")

    def browser_errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser")
                if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]


def chromium() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing_browser()
    if reason:
        print(f"browser tests skipped: {reason}")
        pytest.skip(reason)
    driver = chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def console(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("console")
    fleet = Fleet(tmp)
    http_port = free_port()
    try:
        fleet.up(JOBS_CONFIG, "--http-port", str(http_port))
        # the job first, on the node the XID test takes down, so its allocation is lost there
        fleet.agent("web-xid", "--fake-gpus", "4")
        wait_until(lambda: fleet.state("web-xid") == "READY", what="web-xid READY")
        (tmp / "job.yaml").write_text(JOB)
        herd("job", "run", str(tmp / "job.yaml"), server=fleet.url, check=True)
        wait_until(lambda: '"running"' in herd("alloc", "list", "-o", "json", "--node", "web-xid",
                                                server=fleet.url).stdout,
                   what="the job running on web-xid")
        for node in ("web-a", "web-b", "web-kill"):
            fleet.agent(node)
        wait_until(lambda: all(fleet.state(n) == "READY" for n in ("web-a", "web-b", "web-kill")),
                   what="the fleet READY")
        yield Console(fleet, http_port, browser)
    finally:
        fleet.stop()


def poll(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    return wait_until(predicate, timeout=timeout, interval=0.05, what=what)


def settle(seconds: float) -> None:
    time.sleep(seconds)
