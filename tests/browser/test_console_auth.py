"""The console against `herd up --auth`: without a token the page says so; a read-only
token (`herd creds operator --http --read-only`) reads the fleet and follows the live
stream, and its cordon is refused with the server's message and appends nothing."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Console
from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = [pytest.mark.browser, pytest.mark.e2e]


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.HTTPError as err:
        return err.code == 401
    except OSError:
        return False
    return False


@pytest.fixture(scope="module")
def secured(browser: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Console, str]]:
    tmp = tmp_path_factory.mktemp("console-auth")
    fleet = Fleet(tmp)
    http_port = free_port()
    try:
        fleet.spawn("up", "up", "--auth", "--nats-port", str(fleet.port), "--http-port",
                    str(http_port), "--data-dir", str(tmp / "data"), "--node-id", "cp-1")
        wait_until(lambda: answers(f"http://127.0.0.1:{http_port}/v1/status"),
                   what="herd up --auth to answer over HTTP")
        issued = herd("creds", "operator", "--name", "viewer", "--http", "--read-only",
                      "--data-dir", str(tmp / "data"), check=True)
        token = re.search(r"token: (\S+)", issued.stdout)
        assert token, issued.stdout
        yield Console(fleet, http_port, browser), token.group(1)
    finally:
        fleet.stop()


def test_a_read_only_token_reads_but_its_cordon_is_refused_clearly(
        secured: tuple[Console, str]) -> None:
    console, token = secured
    console.open()
    shown = console.wait_js("const e = document.querySelector('#error');"
                            "return !e.hidden && e.textContent", what="the 401")
    assert shown.startswith("401 unauthenticated"), shown

    console.driver.find_element("id", "token").send_keys(token)
    console.driver.find_element("css selector", "#token-form button").click()
    console.wait_fleet()
    assert console.wait_js("return document.querySelector(\"#fbody tr[data-id='cp-1']\") !== null",
                           what="cp-1 in the fleet table")

    console.open("node/cp-1")
    console.wait_js("return document.querySelector('#node-state')?.dataset.state", what="cp-1")
    console.driver.find_element("id", "reason").send_keys("should not land")
    console.driver.find_element("css selector", "[data-action=cordon]").click()
    refused = console.wait_js("return document.querySelector('#notice .bad')?.textContent",
                              what="the refusal")
    assert refused.startswith("cordon refused (403") and "may only read" in refused, refused
    node = console.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/v1/nodes/cp-1', {headers: {Authorization: 'Bearer ' + arguments[0]}})"
        ".then(r => r.json()).then(n => done(n.intent));", token)
    assert node == "ELIGIBLE"                                # nothing appended

    # an allocation's output is not a read (it may hold secrets): the logs view says so
    console.open("jobs")
    shown = console.driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const box = document.createElement('div'); document.querySelector('#main').append(box);"
        "import('/console/jobs.js').then(m => m.showLogs(box, 'a-1'))"
        ".then(() => done(box.dataset.state + ' ' + box.querySelector('#logs-text').textContent),"
        "      err => done('threw ' + err));")
    assert shown.startswith("refused logs refused (403 forbidden):"), shown
    assert "may only read" in shown and "needs an operator token" in shown, shown
