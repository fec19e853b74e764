"""The fleet page (issue 28 items 1, 2, 7) in headless Chromium against a real
`herd up --demo 9` (nine in-process agents with 8 fake GPUs each, racks r0..r3): the
table sorted and filtered with the view in the URL and back, the map grouped by rack, a
bulk cordon of a rack with a refusal and an "already" shown per node, and all of it by
keyboard at 1280x720."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs

import pytest

from tests.browser.conftest import Console, poll
from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

CONFIG = """
approval:
  auto_approve: true
"""
DEMO = [f"demo-{i:03d}" for i in range(9)]
RACK_R0 = ["demo-000", "demo-004", "demo-008"]          # demo node i is in rack r{i % 4}


@pytest.fixture(scope="module")
def console(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("console-fleet")
    fleet = Fleet(tmp)
    http_port = free_port()
    try:
        fleet.up(CONFIG, "--http-port", str(http_port), "--demo", str(len(DEMO)))
        wait_until(lambda: all(fleet.state(n) == "READY" for n in DEMO), timeout=90,
                   what="the demo fleet READY")
        yield Console(fleet, http_port, browser)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        fleet.stop()


def shown_ids(console: Console) -> list[str]:
    ids: list[str] = console.js("return [...document.querySelectorAll('#fbody tr[data-id]')]"
                                ".map(r => r.dataset.id)")
    return ids


def query(console: Console) -> dict[str, list[str]]:
    hash_: str = console.js("return location.hash")
    assert hash_.startswith("#/?"), hash_
    return parse_qs(hash_[3:])


def type_into(console: Console, element_id: str, text: str) -> None:
    box = console.driver.find_element("id", element_id)
    box.clear()
    box.send_keys(text)
    console.js(f"document.getElementById('{element_id}').dispatchEvent(new Event('input'))")


def test_sort_and_filter_round_trip_through_the_url(console: Console) -> None:
    console.open()
    console.wait_fleet()
    poll(lambda: len(shown_ids(console)) == len(DEMO) + 1, what="every node in the table")
    assert shown_ids(console) == ["cp-1", *DEMO]               # by id, ascending
    console.driver.find_element("css selector", "[data-sort=id]").click()
    assert shown_ids(console) == [*reversed(DEMO), "cp-1"]
    assert console.js("return document.querySelector('th[data-col=id]')"
                      ".getAttribute('aria-sort')") == "descending"
    type_into(console, "f-label", "rack=r1")
    assert shown_ids(console) == ["demo-005", "demo-001"]
    assert console.driver.find_element("id", "shown").text == f"2 of {len(DEMO) + 1} shown"
    # every column sorts: GPUs ok (8/8 for each demo node, cp-1 has none: last)
    console.driver.find_element("css selector", "[data-sort=gpus]").click()
    assert query(console) == {"label": ["rack=r1"], "sort": ["gpus"]}
    type_into(console, "search", "005")
    url = console.js("return location.href")
    assert query(console) == {"label": ["rack=r1"], "sort": ["gpus"], "q": ["005"]}

    # the URL alone gives the same view, in a fresh page
    console.driver.get("about:blank")
    console.driver.get(url)
    console.wait_fleet()
    poll(lambda: shown_ids(console) == ["demo-005"], what="the shared view")
    assert console.driver.find_element("id", "f-label").get_attribute("value") == "rack=r1"
    assert console.driver.find_element("id", "search").get_attribute("value") == "005"
    assert console.js("return document.querySelector('th[data-col=gpus]')"
                      ".getAttribute('aria-sort')") == "ascending"

    # the CLI's selector syntax: a broken one says how to write it
    type_into(console, "search", "")
    type_into(console, "f-label", "rack")
    error = console.driver.find_element("id", "label-error").text
    assert error == 'invalid label "rack": write key=value[,key=value]', error
    type_into(console, "f-label", "rack=r0,demo=true")
    assert shown_ids(console) == RACK_R0
    console.js("const s = document.querySelector('#f-state'); s.value = 'READY';"
               "s.dispatchEvent(new Event('input'))")
    assert query(console)["state"] == ["READY"] and len(shown_ids(console)) == 3
    assert console.browser_errors() == []


def choose(console: Console, select_id: str, value: str) -> None:
    console.js("const s = document.getElementById(arguments[0]); s.value = arguments[1];"
               "s.dispatchEvent(new Event('input'))", select_id, value)


def fleet_rows(console: Console) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{console.base}/v1/fleet", timeout=10) as reply:
        fleet = json.loads(reply.read())
    return [dict(zip(fleet["columns"], row, strict=True)) for row in fleet["rows"]]


def test_health_class_and_pool_filters_round_trip_through_the_url(console: Console) -> None:
    rows = fleet_rows(console)
    other = next(r for r in rows if r["health"] != "HEALTHY")        # cp-1: no GPUs, no verdict
    console.open()
    console.wait_fleet()
    poll(lambda: len(shown_ids(console)) == len(DEMO) + 1, what="every node in the table")
    choose(console, "f-health", "HEALTHY")
    assert shown_ids(console) == sorted(r["id"] for r in rows if r["health"] == "HEALTHY")
    choose(console, "f-health", other["health"])
    choose(console, "f-class", other["class"])
    expected = sorted(r["id"] for r in rows
                      if r["health"] == other["health"] and r["class"] == other["class"])
    assert other["id"] in expected and shown_ids(console) == expected
    assert query(console) == {"health": [other["health"]], "class": [other["class"]]}
    url = console.js("return location.href")
    console.driver.get("about:blank")
    console.driver.get(url)
    console.wait_fleet()
    poll(lambda: shown_ids(console) == expected, what="the shared health and class view")
    assert console.driver.find_element("id", "f-health").get_attribute("value") == other["health"]
    assert console.driver.find_element("id", "f-class").get_attribute("value") == other["class"]
    # a pool no node is in (a view shared before the pool filled): kept, chosen, nothing shown
    console.open("?pool=gpu-a")
    console.wait_fleet()
    poll(lambda: console.driver.find_element("id", "shown").text == f"0 of {len(rows)} shown",
         what="the empty pool")
    assert console.driver.find_element("id", "f-pool").get_attribute("value") == "gpu-a"
    choose(console, "f-pool", "")
    assert console.js("return location.hash") == "#/" and len(shown_ids(console)) == len(rows)


def test_the_bulk_toolbar_offers_every_bulk_verb_of_the_command_table(console: Console) -> None:
    from herdbook.api.commands import VERBS
    console.open()
    console.wait_fleet()
    offered = console.js("return [...document.querySelectorAll('#bulk [data-bulk]')]"
                         ".map(b => b.dataset.bulk)")
    assert offered == [verb.name for verb in VERBS if verb.bulk]
    assert {"cordon", "drain", "undrain", "disable", "enable", "reboot", "approve",
            "reject"} <= set(offered)


def test_the_map_groups_by_rack_with_counts_and_ids(console: Console) -> None:
    console.open("?view=map&group=rack")
    console.wait_fleet()
    groups = console.wait_js(
        "const s = [...document.querySelectorAll('#map section.group')];"
        "return s.length === 5 && s.map(g => [g.dataset.group, g.querySelector('.gcount')"
        ".textContent, [...g.querySelectorAll('.cell')].map(c => c.dataset.id)])",
        what="five groups")
    assert groups == [["r0", "3 nodes", RACK_R0], ["r1", "2 nodes", ["demo-001", "demo-005"]],
                      ["r2", "2 nodes", ["demo-002", "demo-006"]],
                      ["r3", "2 nodes", ["demo-003", "demo-007"]],
                      ["(none)", "1 node", ["cp-1"]]], groups
    assert "READY 3" in console.js("return document.querySelector('[data-group=r0] .gstates')"
                                   ".textContent")
    # the id on hover (title), and written in each cell at the closest zoom
    assert console.js("return document.querySelector(\".cell[data-id='demo-004']\").title"
                      ).startswith("demo-004 READY HEALTHY")
    console.js("const z = document.querySelector('#zoom'); z.value = '3';"
               "z.dispatchEvent(new Event('input'))")
    assert console.js("return document.querySelector(\".cell[data-id='demo-004']\")"
                      ".textContent.trim()") == "demo-004"
    assert query(console) == {"view": ["map"], "zoom": ["3"]}
    console.js("const g = document.querySelector('#group'); g.value = 'demo';"
               "g.dispatchEvent(new Event('input'))")
    assert console.js("return [...document.querySelectorAll('#map section.group')]"
                      ".map(g => g.dataset.group)") == ["true", "(none)"]


def test_a_bulk_cordon_of_a_rack_shows_each_node_result_and_the_refusal(
        console: Console) -> None:
    drained = herd("node", "drain", "demo-004", "-m", "bench test", server=console.fleet.url)
    assert drained.returncode == 0, drained.stderr
    herd("node", "cordon", "demo-008", server=console.fleet.url, check=True)
    wait_until(lambda: console.fleet.state("demo-004") in ("DRAINING", "DRAINED"),
               what="demo-004 draining")
    console.open("?view=map")
    console.wait_fleet()
    console.wait_js("return document.querySelector(\".cell[data-id='demo-008']\")"
                    "?.dataset.state === 'CORDONED'", what="demo-008 CORDONED on the map")
    assert console.js("return document.querySelector(\".cell[data-id='demo-008']\")"
                      ".textContent") == "C"                  # not told by colour alone
    console.driver.find_element("css selector", "input[data-group-sel=r0]").click()
    assert console.driver.find_element("id", "sel-count").text == "3 selected"
    console.driver.find_element("id", "bulk-reason").send_keys("rack r0 PDU swap")
    console.driver.find_element("css selector", "[data-bulk=cordon]").click()
    assert console.driver.find_element("id", "confirm-text").text == "cordon 3 nodes?"
    console.driver.find_element("id", "confirm-ok").click()
    console.wait_js("return document.querySelector('.results')?.dataset.done === 'true'",
                    what="every node answered")
    results = {r[0]: r[1:] for r in console.js(
        "return [...document.querySelectorAll('.results tbody tr')].map(r => "
        "[r.dataset.id, r.dataset.result, r.cells[2].textContent])")}
    assert results["demo-000"] == ["done", "cordoned"], results
    assert results["demo-004"][0] == "refused" and \
        results["demo-004"][1].startswith("refused (409 refused):"), results
    assert results["demo-008"] == ["unchanged", "already cordoned (state CORDONED)"], results
    title = console.driver.find_element("css selector", ".results h2").text
    assert title == "cordon: 1 done, 1 already, 1 refused", title
    # live: the cordoned node's cell changes without a reload; the reason was recorded
    console.wait_js("return document.querySelector(\".cell[data-id='demo-000']\")"
                    ".dataset.state === 'CORDONED'", what="demo-000 CORDONED on the map")
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.demo-000.>",
                server=console.fleet.url, check=True)
    reasons = [json.loads(line).get("reason") for line in tail.stdout.splitlines()
               if json.loads(line).get("type") == "node.cordoned"]
    assert reasons[-1:] == ["rack r0 PDU swap"], tail.stdout


def test_every_action_by_keyboard_at_1280x720(console: Console) -> None:
    from selenium.webdriver.common.keys import Keys

    # a 1280x720 viewport (a window of that size has less: its own frame)
    console.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False})
    console.open("?sort=id")
    console.wait_fleet()
    poll(lambda: len(shown_ids(console)) == len(DEMO) + 1, what="the table")
    driver = console.driver
    assert console.js("return document.documentElement.scrollWidth") <= 1280   # no sideways scroll
    table_bottom = console.js("return document.querySelector('#tscroll')"
                              ".getBoundingClientRect().bottom")
    assert table_bottom <= 720, table_bottom
    assert console.js("return document.querySelector('#tscroll').clientHeight") >= 10 * 26
    # "/" to search, then the table: arrows, space to select, shift+arrow to extend
    driver.find_element("tag name", "body").send_keys("/")
    assert console.js("return document.activeElement.id") == "search"
    grid = driver.find_element("id", "tscroll")
    grid.send_keys(Keys.ARROW_DOWN)                   # cp-1 -> demo-000
    grid.send_keys(Keys.SPACE)
    grid.send_keys(Keys.SHIFT, Keys.ARROW_DOWN)       # and demo-001
    assert driver.find_element("id", "sel-count").text == "2 selected"
    assert console.js("return [...document.querySelectorAll('#fbody tr[aria-selected=true]')]"
                      ".map(r => r.dataset.id)") == ["demo-000", "demo-001"]
    assert console.js("return document.querySelector('#tscroll')"
                      ".getAttribute('aria-activedescendant')") == "row-2"
    # the states are written, not only coloured
    assert console.js("return document.querySelector(\"#fbody tr[data-id='demo-008'] .st\")"
                      ".textContent") == "CCORDONED"
    # a bulk action's confirmation by keyboard: Escape cancels, nothing is sent
    driver.find_element("css selector", "[data-bulk=uncordon]").send_keys(Keys.ENTER)
    assert console.js("return document.querySelector('#confirm').open")
    assert console.js("return document.activeElement.id") == "confirm-ok"
    driver.switch_to.active_element.send_keys(Keys.ESCAPE)
    assert not console.js("return document.querySelector('#confirm').open")
    assert console.js("return document.querySelector('.results')") is None
    # Escape in the table clears the selection; Enter opens the node under the cursor
    grid.send_keys(Keys.ESCAPE)
    assert driver.find_element("id", "sel-count").text == "0 selected"
    grid.send_keys(Keys.ENTER)
    console.wait_js("return location.hash === '#/node/demo-001'", what="the node page")
