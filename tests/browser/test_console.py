"""The web console in headless Chromium against a real `herd up` and real agents: the
grid, a killed agent seen live, cordon from the page, an XID 79's cause chain, the
screenshots. Run alone: ``python -m pytest tests/browser -m browser``."""

from __future__ import annotations

import json
import re
import signal

import pytest

from tests.browser.conftest import Console, poll
from tests.conftest import herd

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

NODES = ("web-a", "web-b", "web-kill", "web-xid")


def cell_state(console: Console, node_id: str) -> str | None:
    state: str | None = console.js(
        "const c = document.querySelector(`#fbody tr[data-id='${arguments[0]}']`);"
        "return c && c.dataset.state;", node_id)
    return state


def test_the_grid_shows_every_node_with_counts_filters_and_search(console: Console) -> None:
    console.open()
    console.wait_fleet()
    poll(lambda: all(cell_state(console, n) == "READY" for n in NODES), what="four READY cells")
    ids = console.js("return [...document.querySelectorAll('#fbody tr[data-id]')]"
                     ".map(c => c.dataset.id)")
    assert sorted(ids) == sorted([*NODES, "cp-1"])     # the control plane's requester node too
    ready = console.js("return document.querySelectorAll(\"#fbody tr[data-state='READY']\")"
                       ".length")
    assert console.js("return document.querySelector(\".count[data-state='READY']\")"
                      ".dataset.count") == str(ready)
    # search by id prefix, then a state filter
    search = console.driver.find_element("id", "search")
    search.send_keys("web-k")
    shown = console.js("return [...document.querySelectorAll('#fbody tr[data-id]')]"
                       ".map(c => c.dataset.id)")
    assert shown == ["web-kill"]
    search.clear()
    search.send_keys("web-")
    console.js("const s = document.querySelector('#f-state'); s.value = 'READY';"
               "s.dispatchEvent(new Event('input'))")
    assert console.js("return document.querySelectorAll('#fbody tr[data-id]').length") == len(NODES)
    search.clear()
    console.js("const s = document.querySelector('#f-state'); s.value = '';"
               "s.dispatchEvent(new Event('input'))")
    console.screenshot("console-fleet.png")
    assert console.browser_errors() == []


def test_a_killed_agent_turns_its_cell_degraded_then_down_without_a_reload(
        console: Console) -> None:
    console.open()
    console.wait_fleet()
    poll(lambda: cell_state(console, "web-kill") == "READY", what="web-kill READY")
    console.js("window.stillTheSamePage = true")
    console.fleet.procs["web-kill"].send_signal(signal.SIGKILL)
    poll(lambda: cell_state(console, "web-kill") == "DOWN", timeout=15, what="web-kill DOWN")
    assert console.js("return window.stillTheSamePage") is True     # no reload
    seen = console.js("return herdConsole.updates.filter(u => u.id === 'web-kill')"
                      ".map(u => u.state)")
    assert "DEGRADED" in seen and seen.index("DEGRADED") < seen.index("DOWN"), seen


def test_cordon_from_the_page_lands_as_an_event_with_the_reason(console: Console) -> None:
    console.open("node/web-a")
    console.wait_js("return document.querySelector('#node-state')?.dataset.state === 'READY'",
                    what="web-a's page")
    console.driver.find_element("id", "reason").send_keys("fan replaced <b>soon</b>")
    console.driver.find_element("css selector", "[data-action=cordon]").click()
    console.wait_js("return document.querySelector('#notice .good')", what="the cordon notice")
    console.wait_js("return document.querySelector('#node-state').dataset.state === 'CORDONED'",
                    what="CORDONED on the page")
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.web-a.>",
                server=console.fleet.url, check=True)
    cordoned = [json.loads(line) for line in tail.stdout.splitlines()
                if json.loads(line).get("type") == "node.cordoned"]
    assert cordoned and cordoned[-1]["reason"] == "fan replaced <b>soon</b>", tail.stdout
    # the reason is shown as text, never as markup
    assert console.js("return document.querySelector('#timeline b b')") is None

    # an action whose goal already holds says so, with the state (nothing appended)
    console.driver.find_element("css selector", "[data-action=approve]").click()
    console.wait_js("return document.querySelector('#notice .good')?.textContent"
                    ".includes('already approved')", what="the already-approved notice")
    # a refused action shows the server's message
    console.driver.find_element("css selector", "[data-action=drain]").click()
    console.wait_js("return document.querySelector('#node-state').dataset.state === 'DRAINING'"
                    " || document.querySelector('#node-state').dataset.state === 'DRAINED'",
                    what="draining on the page")
    console.driver.find_element("css selector", "[data-action=cordon]").click()
    console.wait_js("return document.querySelector('#notice .bad')", what="the refusal")
    notice = console.driver.find_element("css selector", "#notice .bad").text
    assert notice.startswith("cordon refused (409"), notice


def test_the_node_page_shows_an_xid_79_cause_chain_and_the_gpu(console: Console) -> None:
    result = herd("agent", "inject", "--node", "web-xid", "xid", "79", "--gpu", "2",
                  server=console.fleet.url)
    assert result.returncode == 0, result.stderr
    console.open("node/web-xid")
    console.wait_js("return document.querySelector('#node-state')?.dataset.state === 'DOWN'",
                    what="web-xid DOWN on its page")
    chain = console.wait_js(
        "const t = [...document.querySelectorAll('#chains pre')].map(p => p.textContent)"
        ".join('\\n'); return t.includes('alloc.placed') && t", what="the whole cause chain")
    lines = chain.splitlines()
    order = [next(i for i, line in enumerate(lines) if word in line)
             for word in ("XID 79", "node.down", "alloc.lost", "alloc.placed")]
    assert order == sorted(order), chain
    gpus = console.js("return [...document.querySelectorAll('.gpu')].map(g => g.dataset.health)")
    assert gpus == ["HEALTHY", "HEALTHY", "UNHEALTHY", "HEALTHY"]
    assert "node.down" in console.driver.find_element("id", "timeline").text
    console.screenshot("console-node.png")

    # the as-of slider: half a second before the fault the node was READY
    console.js("""const fatal = [...document.querySelectorAll('#timeline li')]
                    .find(li => li.textContent.includes('XID 79'));
                  const r = herdConsole.asOfRange, at = Date.parse(fatal.dataset.at) - 500;
                  const slider = document.querySelector('#at');
                  slider.value = Math.floor(1000 * (at - r.from) / (r.to - r.from));
                  slider.dispatchEvent(new Event('input'));""")
    past = console.wait_js("return document.querySelector('#as-of dl')?.textContent",
                           what="the node as of then")
    assert "stateREADY" in past.replace(" ", ""), past
    assert console.js("return [...document.querySelectorAll('#timeline li')]"
                      ".some(li => li.style.opacity === '0.35')")     # later events dimmed


def test_pools_jobs_evals_and_the_control_plane_pages(console: Console) -> None:
    console.open("jobs")
    console.wait_js("return document.querySelector('#list')?.textContent.includes('web-train')",
                    what="the job")
    console.open("evals")
    console.wait_js("return document.querySelector('#list')?.textContent.includes('job-register')",
                    what="the evaluations")
    console.open("status")
    console.wait_js("return document.querySelector('#leader')?.dataset.leader === 'true'",
                    what="the leader")
    status = console.driver.find_element("id", "status").text
    assert "heartbeat age p99" in status
    assert re.search(r"fleet health score\s+\d+ / 100", status), status   # issue 19 item 5
    assert "open faults" in status
    console.open("pools")
    console.wait_js("return document.querySelector('#list')", what="the pools page")
    assert console.browser_errors() == []
