"""The web console in headless Chromium against a real `herd up` and real agents: the
table, a killed agent seen live, cordon from the page, an XID 79's cause chain. Run
alone: ``python -m pytest tests/browser -m browser``."""

from __future__ import annotations

import json
import re
import signal
from typing import Any

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


def test_the_table_shows_every_node_with_counts_filters_and_search(console: Console) -> None:
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
    assert console.browser_errors() == []


def test_a_killed_agent_turns_its_row_degraded_then_down_without_a_reload(
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
    # what to do about it, from the verdict (docs/remediation.md#what-to-do-per-fault)
    info = console.wait_js("const t = document.querySelector('#info')?.textContent;"
                           "return t && t.includes('reboot_node') && t", what="the action")
    assert "recommended actionreboot_node" in info, info
    assert "node.down" in console.driver.find_element("id", "timeline").text

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


# The CLI's node commands that are not buttons on a node's page, and why (docs/console.md).
NOT_ON_THE_NODE_PAGE = {"list": "the fleet page", "describe": "the node page itself",
                        "status": "the node page itself", "history": "the page's timeline",
                        "add": "a node with no page yet: the CLI",
                        "fingerprint": "asks the agent over NATS, no HTTP route",
                        "conformance": "fleet-wide, not one node"}


def cli_node_commands() -> set[str]:
    from typer.main import get_command

    from herdbook.cli.main import app
    group: Any = get_command(app)
    return set(group.commands["node"].commands) | set(group.commands["admin"].commands["node"]
                                                       .commands)


def command(console: Console, action: str) -> str:
    """Press `action` on the node page and return the notice it leaves."""
    console.js("document.querySelector('#notice').innerHTML = ''")
    console.driver.find_element("css selector", f"#commands [data-action={action}]").click()
    text: str = console.wait_js("return document.querySelector('#notice .notice')?.textContent",
                                what=f"{action}'s notice")
    return text


def confirm(console: Console, question: str, typed: str = "") -> None:
    shown = console.wait_js("const d = document.querySelector('#cmd-dialog');"
                            "return d.open && d.textContent", what="the confirmation")
    assert question in shown, shown
    ok = console.driver.find_element("id", "cmd-ok")
    if typed:
        assert not ok.is_enabled()                   # the node's id must be typed first
        console.driver.find_element("id", "cmd-typed").send_keys(typed)
    ok.click()


def test_every_node_command_of_the_cli_is_on_the_node_page(console: Console) -> None:
    console.open("node/web-b")
    console.wait_js("return document.querySelector('#node-state')?.dataset.state === 'READY'",
                    what="web-b's page")
    buttons = set(console.js("return [...document.querySelectorAll('#commands [data-action]')]"
                             ".map(b => b.dataset.action)"))
    assert buttons == cli_node_commands() - set(NOT_ON_THE_NODE_PAGE), buttons
    # validate without a configured check: the server's refusal
    assert "no validation check is configured" in command(console, "validate")
    # drain --urgent --deadline 30m: asked first, then both land on the event
    console.driver.find_element("id", "drain-deadline").send_keys("soon")
    assert "not a duration" in command(console, "drain")               # nothing sent
    console.driver.find_element("id", "drain-deadline").clear()
    console.driver.find_element("id", "drain-deadline").send_keys("30m")
    console.driver.find_element("id", "drain-urgent").click()
    console.driver.find_element("css selector", "#commands [data-action=drain]").click()
    confirm(console, "Drain web-b urgently?")
    console.wait_js("return document.querySelector('#info')?.textContent.includes('urgent, deadline')",
                    what="the drain's options on the page")
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.web-b.>",
                server=console.fleet.url, check=True)
    drains = [e for line in tail.stdout.splitlines()
              if (e := json.loads(line)).get("type") == "node.drain_started"]
    assert drains and drains[-1]["urgent"] is True and drains[-1]["deadline_s"] == 1800, drains

    # a sensitive node: claim with user and tenant, release, wipe (--force), delete
    herd("node", "add", "secure-1", "--class", "sensitive", server=console.fleet.url, check=True)
    console.open("node/secure-1")
    console.wait_js("return document.querySelector('#node-state')?.dataset.state === 'UNKNOWN'",
                    what="secure-1's page")
    assert "write who claims" in command(console, "claim")
    console.driver.find_element("id", "claim-user").send_keys("ana")
    console.driver.find_element("id", "claim-tenant").send_keys("t1")
    # past the server's "needs --user": user sent, refused for the node's state
    assert "cannot claim node secure-1: it is UNKNOWN" in command(console, "claim")
    assert "already released" in command(console, "release")
    console.driver.find_element("css selector", "#commands [data-action=wipe]").click()
    confirm(console, "Wipe secure-1?", typed="secure-1")
    wiped = console.wait_js("return document.querySelector('#notice .bad')?.textContent",
                            what="the wipe's refusal")
    assert "cannot wipe node secure-1: it is UNKNOWN" in wiped, wiped      # force was sent
    console.driver.find_element("css selector", "#commands [data-action=delete]").click()
    confirm(console, "Delete node secure-1?")
    console.wait_js("return document.querySelector('#node-state').dataset.state === 'DELETED'",
                    what="secure-1 deleted")
    assert "secure-1" not in console.fleet.nodes()
    assert console.browser_errors() == []


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
    assert re.search(r"validating\s+0 node\(s\)", status), status     # issue 29
    repairs = console.wait_js("return document.querySelector('#repairs dl')?.textContent",
                              what="the repair metrics")
    for word in ("MTTR p50 / p90", "time to quarantine", "availability", "GPU-hours"):
        assert word in repairs, (word, repairs)
    # with episodes: the four durations per pool (and its availability) and per fault kind
    four = {"time_to_quarantine": {"p50_s": 30, "p90_s": 90, "count": 2},
            "time_to_drain": {"p50_s": 200, "p90_s": 400, "count": 2},
            "time_in_repair": {"p50_s": 3600, "p90_s": 7200, "count": 2},
            "mttr": {"p50_s": 3630, "p90_s": 7290, "count": 2}}
    reply = {"window": "7d", "back_in_service": 2, "open": 0, **four,
             "by_pool": {"h100": {**four, "availability": 0.97}}, "by_kind": {"xid": four}}
    console.js("import('/console/app.js').then(m => { const d = document.createElement('div');"
               "d.id = 'drawn'; d.innerHTML = m.repairsHtml(arguments[0]);"
               "document.body.append(d); })", reply)
    rows = console.wait_js(
        "const rows = [...document.querySelectorAll('#drawn table.repairs-by tr')];"
        "return rows.length === 4 && rows.map(r => [...r.children].map(c => c.textContent))",
        what="the per-pool and per-kind tables")
    assert rows[0][1:] == ["time to quarantine p50 / p90 (episodes)",
                           "time to drain p50 / p90 (episodes)",
                           "time in repair p50 / p90 (episodes)",
                           "MTTR p50 / p90 (episodes)", "availability"]
    durations = ["30 s / 90 s (2)", "3.3 min / 6.7 min (2)", "60.0 min / 2.0 h (2)",
                 "60.5 min / 2.0 h (2)"]
    assert rows[1] == ["h100", *durations, "97.00 %"]
    assert rows[3] == ["xid", *durations]
    console.open("pools")
    console.wait_js("return document.querySelector('#list')", what="the pools page")
    assert console.browser_errors() == []
