"""The console's detail pages in headless Chromium against a real `herd up` and a real
agent with fake GPUs sampling every second (issue 28 items 3-5, their half of item 6):
a GPU card's numbers move when `herd agent inject thermal 95` runs, the fleet chart
shows the detection it caused, a job that fits nowhere says why per resource, and a
finished batch job reads complete. Run alone: ``python -m pytest tests/browser -m
browser``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Console
from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import JOBS_CONFIG, Fleet

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

NODE = "gpu-hot"
TOO_BIG = """\
id: too-big
count: 1
command: ["sleep", "300"]
resources: {cpu: 0.01, memory_mb: 1, gpus: 64}
"""
QUICK = """\
id: quick
count: 1
command: ["sh", "-c", "for i in $(seq 1 300); do echo quick line $i; done"]
resources: {cpu: 0.01, memory_mb: 1, gpus: 0}
requeue: {policy: never}
"""

# A check run only when asked (when: []): `validate` on the node page starts it.
VALIDATION = """
validation:
  name: burn-in
  command: ["sleep", "5"]
  when: []
"""


@pytest.fixture(scope="module")
def detail(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("detail")
    fleet = Fleet(tmp)
    http_port = free_port()
    try:
        fleet.up(JOBS_CONFIG + VALIDATION, "--http-port", str(http_port))
        fleet.agent(NODE, "--fake-gpus", "4", "--telemetry-interval", "1s")
        wait_until(lambda: fleet.state(NODE) == "READY", timeout=60, what=f"{NODE} READY")
        for name, text in (("too-big", TOO_BIG), ("quick", QUICK)):
            (tmp / f"{name}.yaml").write_text(text)
            herd("job", "run", str(tmp / f"{name}.yaml"), server=fleet.url, check=True)
        yield Console(fleet, http_port, browser)
    finally:
        fleet.stop()


def card(console: Console, gpu: int) -> dict[str, Any] | None:
    found: dict[str, Any] | None = console.js(
        "const c = document.querySelector(`.gpu-card[data-gpu='${arguments[0]}']`);"
        "return c && {temp: c.dataset.temp, level: c.dataset.level, health: c.dataset.health,"
        " text: c.textContent,"
        " shown: c.querySelector('[data-reading=temperature_c]').textContent};", gpu)
    return found


def test_a_blocked_job_says_why_and_a_finished_one_is_complete(detail: Console) -> None:
    # first: the thermal tests below take the node out, and then its state is the reason
    detail.open("jobs")
    detail.wait_js("return document.querySelector(\"tr[data-job='too-big']\")?.dataset.phase"
                   " === 'blocked'", timeout=40, what="too-big blocked in the table")
    detail.wait_js("return document.querySelector(\"tr[data-job='quick']\")?.dataset.phase"
                   " === 'complete'", timeout=30, what="quick complete, not running")
    detail.driver.find_element("css selector", "tr[data-job='too-big'] a").click()
    why = detail.wait_js("return document.querySelector('#why')?.textContent", what="the reason")
    assert "resources exhausted (gpus): 1 node(s)" in why, why
    assert "needs 64 GPU(s)" in why and "blocked evaluation" in why, why
    # the API's largest_free and reasons, not only the counts
    assert "largest free on a node that passes the constraints: gpus 4 on 1 node(s)" in why, why
    assert "scheduler: 64 GPUs asked; largest free: 4 on 1 node; short on 1 node" in why, why
    assert detail.js("return document.querySelector(\"#job-evals tr[data-status='blocked']\")")
    detail.open("job/quick")
    detail.wait_js("return document.querySelector('#job-phase')?.dataset.phase === 'complete'",
                   what="quick's page")
    row = detail.js("return document.querySelector(\"#job-allocs tr[data-status='complete']\")"
                    ".textContent")
    assert NODE in row, row
    assert detail.js("return document.querySelector('#why').textContent") == ""
    assert detail.browser_errors() == []


def logs(console: Console) -> dict[str, Any]:
    shown: dict[str, Any] = console.js(
        "const b = document.querySelector('#alloc-logs');"
        "return {state: b.dataset.state, offset: b.dataset.offset, next: b.dataset.next,"
        " text: document.querySelector('#logs-text').textContent,"
        " status: document.querySelector('#logs-status').textContent,"
        " more: document.querySelector('#logs-more').disabled, reads: window.herdLogs.reads};")
    return shown


def test_an_allocations_output_its_tail_then_more_then_newer(detail: Console) -> None:
    detail.open("job/quick")
    detail.wait_js("return document.querySelector('#job-phase')?.dataset.phase === 'complete'",
                   timeout=30, what="quick complete")
    assert detail.js("return document.querySelector('#alloc-logs').hidden") is True
    detail.driver.find_element("css selector", "#job-allocs button[data-logs]").click()
    detail.wait_js("return document.querySelector('#alloc-logs')?.dataset.state === 'shown'",
                   what="the output shown")
    tail = logs(detail)
    lines = tail["text"].splitlines()
    assert lines == [f"quick line {i}" for i in range(201, 301)], lines[:3]    # the last 100
    assert int(tail["offset"]) > 0 and "earlier bytes not shown" in tail["status"], tail
    assert tail["more"] is False
    detail.driver.find_element("id", "logs-more").click()
    detail.wait_js("return document.querySelector('#alloc-logs').dataset.offset === '0'",
                   what="the whole log")
    whole = logs(detail)
    assert whole["text"].splitlines() == [f"quick line {i}" for i in range(1, 301)]
    assert whole["more"] is True and "from the start" in whole["status"], whole
    # newer output: none after the job ended, and nothing shown twice
    detail.driver.find_element("id", "logs-refresh").click()
    detail.wait_js(f"return window.herdLogs.reads > {whole['reads']}", what="the refresh")
    assert logs(detail)["text"] == whole["text"]
    assert f"on {NODE}, ended" in detail.js("return document.querySelector('#logs-where')"
                                            ".textContent")
    assert detail.browser_errors() == []


def test_validate_from_the_node_page_shows_validating_everywhere(detail: Console) -> None:
    detail.open(f"node/{NODE}")
    detail.wait_js("return document.querySelector('#node-state')?.dataset.state === 'READY'",
                   what=f"{NODE}'s page")
    assert "never validated" in detail.js("return document.querySelector('#validation').textContent")
    detail.driver.find_element("css selector", "#commands [data-action=validate]").click()
    detail.wait_js("return document.querySelector('#node-state').dataset.state === 'VALIDATING'",
                   timeout=30, what="VALIDATING on the node page")
    shown = detail.js("return document.querySelector('#validation').textContent")
    for word in ("running", "operator", "burn-in", "requested"):
        assert word in shown, (word, shown)
    # its own glyph and colour in the fleet table and the map's legend
    detail.open("?state=VALIDATING")
    glyph = detail.wait_js(f"return document.querySelector(\"#fbody tr[data-id='{NODE}'] .st i\")"
                           "?.textContent", what="the VALIDATING row")
    assert glyph == "V"
    colour = detail.js(f"return getComputedStyle(document.querySelector(\"#fbody tr[data-id='{NODE}']"
                       " .st i\")).backgroundColor")
    assert colour not in ("rgb(173, 181, 189)", "rgba(0, 0, 0, 0)"), colour    # not UNKNOWN's
    detail.open("?view=map")
    assert "V\nVALIDATING" in detail.wait_js("return document.querySelector('#legend')?.innerText",
                                             what="the map's legend")
    detail.open("status")
    detail.wait_js("return document.querySelector('#status')?.textContent"
                   ".includes('validating1 node(s)')", what="health_score.validating on status")
    detail.open(f"node/{NODE}")
    detail.wait_js("return document.querySelector('#validation')?.dataset.validation === 'passed'",
                   timeout=40, what="the validation passed")
    assert detail.js("return document.querySelector('#node-state').dataset.state") == "READY"
    assert detail.browser_errors() == []


def test_a_gpu_card_moves_when_the_agent_injects_thermal_95(detail: Console) -> None:
    detail.open(f"node/{NODE}")
    detail.wait_js("return document.querySelectorAll('.gpu-card').length === 4",
                   what="four GPU cards")
    before = wait_until(lambda: card(detail, 1) if (card(detail, 1) or {}).get("temp") else None,
                        timeout=20, what="GPU 1's temperature")
    assert float(before["temp"]) < 85, before
    assert before["level"] == "healthy" and before["shown"].endswith("°C")
    for word in ("power", "utilisation", "memory", "clocks", "throttle", "ECC", "remapped rows",
                 "PCIe", "NVLink", "recent faults"):
        assert word in before["text"], (word, before["text"])
    detail.js("window.stillTheSamePage = true")
    result = herd("agent", "inject", "--node", NODE, "thermal", "95", "--gpu", "1",
                  server=detail.fleet.url)
    assert result.returncode == 0, result.stderr
    after = wait_until(lambda: (c := card(detail, 1)) and c["temp"] and float(c["temp"]) >= 95
                       and c["level"] != "healthy" and c, timeout=30,
                       what="GPU 1's card at 95 °C with its verdict")
    assert after["shown"] == "95 °C" and after["health"] == "UNHEALTHY", after
    assert "thermal" in after["text"] and "sw_thermal" in after["text"], after["text"]
    assert (card(detail, 0) or {}).get("level") == "healthy"      # the others stay healthy
    # the temperature chart drew the jump from the ring, one line per GPU and the node's
    temps = detail.wait_js("const c = window.herdCharts['gpu-temperature_c'];"
                           "return c && c.series.length === 5 && c.series[1].values.includes(95)"
                           " && c.series[1].values", what="95 °C on the chart")
    assert min(v for v in temps if v is not None) < 85
    hottest = detail.js("return window.herdCharts['gpu-temperature_c'].series[4]")
    assert hottest["label"] == "hottest GPU" and 95 in hottest["values"], hottest
    power = detail.js("return window.herdCharts['gpu-power_w'].series")
    last = max(i for i, v in enumerate(power[4]["values"]) if v is not None)
    assert power[4]["label"] == "node total"
    assert power[4]["values"][last] == pytest.approx(sum(s["values"][last] for s in power[:4]),
                                                     abs=0.2), power
    assert detail.js("return window.stillTheSamePage") is True
    # the longest window: what the ring keeps (a young control plane: every sample), said
    detail.driver.find_element("css selector", "#gpu-window [data-window='7d']").click()
    note = detail.wait_js("const n = document.querySelector('#gpu-charts-note');"
                          "return n.textContent.includes('kept only since') && n.textContent",
                          what="the 7d window's note")
    assert note.startswith("samples from this control plane's memory") and "lost on restart" in note
    assert 95 in detail.js("return window.herdCharts['gpu-temperature_c'].series[1].values")


def test_the_fleet_chart_shows_the_detection(detail: Console) -> None:
    herd("agent", "inject", "--node", NODE, "thermal", "95", "--gpu", "1",
         server=detail.fleet.url, check=True)
    detail.open("history?window=15m")
    detail.wait_js("return document.querySelector(\"#marks tr[data-kind='detection']"
                   f"[data-node='{NODE}']\")", timeout=30, what="the detection listed")
    detections = detail.js("return window.herdCharts.detections.series[0].values")
    assert sum(detections) >= 1, detections
    assert detail.js("return document.querySelector('#chart-detections canvas') !== null")
    states = detail.js("return window.herdCharts.states.series.map(s => s.label)")
    assert "READY" in states or any(s in states for s in ("CORDONED", "UNHEALTHY")), states
    # nothing of the pages left before (a node page's late reload) writes into this one
    assert detail.js("return document.querySelector('#error').hidden") is True
    assert detail.browser_errors() == []


def test_the_fleet_gpu_view_sorts_by_temperature_health_and_errors(detail: Console) -> None:
    herd("agent", "inject", "--node", NODE, "thermal", "95", "--gpu", "1",
         server=detail.fleet.url, check=True)
    detail.open("gpus?sort=temp")
    first = detail.wait_js("const r = document.querySelector('#gpu-table tr[data-gpu]');"
                           "return r && r.dataset.gpu === '1' && r", timeout=30,
                           what="the hottest GPU first")
    assert first is not None
    detail.driver.find_element("css selector", "[data-sort=node]").click()
    order = detail.js("return [...document.querySelectorAll('#gpu-table tr[data-gpu]')]"
                      ".map(r => r.dataset.gpu)")
    assert order == ["0", "1", "2", "3"], order
    assert "sort=node" in detail.driver.current_url
    # by health: the hot GPU's verdict first; by errors: the one with corrected ECC errors
    detail.driver.find_element("css selector", "[data-sort=health]").click()
    assert detail.js("return document.querySelector('#gpu-table tr[data-gpu]').dataset.gpu") == "1"
    assert "sort=health" in detail.driver.current_url
    herd("agent", "inject", "--node", NODE, "ecc_sbe", "7", "--gpu", "2",
         server=detail.fleet.url, check=True)
    detail.open("gpus?sort=errors")
    first = detail.wait_js("const r = document.querySelector('#gpu-table tr[data-gpu]');"
                           "return r && r.dataset.gpu === '2' && r.textContent", timeout=30,
                           what="the GPU with errors first")
    assert "0 / 7" in first, first                    # uncorrectable / correctable
