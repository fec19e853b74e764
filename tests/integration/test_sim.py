"""`herd sim`: every scenario shipped in herdbook/sim/scenarios/ passes on a real embedded
nats-server and control plane with real in-process agents; a failing assert exits 1 naming the step,
what was expected and what was found; a bad file exits 2 with the key path; a short
chaos run detects every failure it injects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from herdbook.sim.chaos import ChaosOptions, run_chaos
from herdbook.sim.scenario_file import load_scenario, parse_scenario
from herdbook.sim.scenario_run import EXIT_FAILED, run_scenario
from herdbook.sim.scenarios import bundled
from tests.conftest import herd

SCENARIOS = sorted(bundled().values())

SMALL = """
name: {name}
config: {{approval: {{auto_approve: true}}, lifecycle: {{heartbeat_timeout: 1s}}}}
fleet:
  - {{count: 2, prefix: t, gpus: 2, heartbeat_interval: 200ms}}
timeline:
{steps}
"""


def small(name: str, *steps: str) -> str:
    return SMALL.format(name=name, steps="\n".join(f"  - {s}" for s in steps))


def test_the_scenario_list_is_complete() -> None:
    assert {p.stem for p in SCENARIOS} >= {
        "gpu-failure", "xid-classification", "cordon-drain", "heartbeat-loss", "boot-failure",
        "registration-timeout", "sensitive-wipe", "auto-replace", "validation-gate"}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
async def test_scenario_passes(path: Path) -> None:
    scenario = load_scenario(path)
    result = await run_scenario(scenario, source=str(path), seed=1)
    assert result.failure is None, result.failure
    assert result.exit_code == 0
    assert all(step.status == "ok" for step in result.steps)
    assert result.duration_s < 20, f"{path.stem} took {result.duration_s}s"


async def test_detections_are_timed_from_the_injection() -> None:
    scenario = parse_scenario(small(
        "detect", "wait_for: {nodes: all, state: READY, timeout: 20s}",
        "inject: {node: t-001, fault: xid, value: 79}",
        "partition: {node: t-002}",
        "wait_for: {nodes: all, state: [DEGRADED, DOWN], timeout: 5s}"))
    result = await run_scenario(scenario, seed=3)
    assert result.failure is None, result.failure
    by_node = {i["node"]: i for i in result.injections}
    assert by_node["t-001"]["kind"] == "xid 79" and by_node["t-001"]["latency_s"] < 1.0
    # heartbeats stopped: DEGRADED within heartbeat_timeout + a sweep (minus the age of
    # the last heartbeat at the partition)
    assert 0.5 < by_node["t-002"]["latency_s"] < 2.5
    events = {(d["node"], d["event"]) for d in result.detections}
    assert ("t-001", "node.down") in events and ("t-002", "node.degraded") in events


async def test_a_failing_assert_stops_the_run_and_names_the_step() -> None:
    scenario = parse_scenario(small(
        "fails", "wait_for: {nodes: all, state: READY, timeout: 20s}",
        "assert: {node: t-001, state: DOWN}",
        "wait: 10s"))
    result = await run_scenario(scenario, seed=1)
    assert result.exit_code == EXIT_FAILED
    assert result.failure == ("step 2 (assert): expected t-001 state=DOWN; found t-001 "
                              "state=READY")
    assert [s.status for s in result.steps] == ["ok", "failed", "skipped"]


def test_cli_failing_assert_exits_1_with_the_message(tmp_path: Path) -> None:
    path = tmp_path / "fails.yaml"
    path.write_text(small("fails", "wait_for: {nodes: all, state: READY, timeout: 20s}",
                          "assert: {count: {state: READY}, equals: 3}"))
    report = tmp_path / "report.json"
    result = herd("sim", str(path), "--seed", "5", "--report", str(report), timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == ("FAIL fails: step 2 (assert): expected count(nodes state=READY) == 3; "
                         "found 2 (t-001, t-002)")
    data = json.loads(report.read_text())
    assert data["ok"] is False and data["seed"] == 5 and data["exit_code"] == 1
    assert [a["ok"] for a in data["asserts"]] == [True, False]
    assert data["steps"][0]["status"] == "ok" and data["steps"][0]["duration_s"] >= 0


def test_cli_passing_scenario_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(small("ok", "wait_for: {nodes: all, state: READY, timeout: 20s}",
                          "command: {route: node.cordon, id: t-001, reason: test}",
                          "assert: {node: t-001, state: CORDONED}"))
    result = herd("sim", str(path), "--seed", "9", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "PASS ok: 3 steps" in result.stdout and "seed 9" in result.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("name: x\ntimeline:\n  - inject: {node: t-001, fualt: xid}\n",
     "timeline[0].inject: Object contains unknown field `fualt`"),
    (small("x", "inject: {node: t-009, fault: xid, value: 79}"),
     "timeline[0].inject.node: t-009 is not a fleet node"),
    (small("x", "wait: 2 hours"), "timeline[0].wait: invalid duration '2 hours'"),
    (small("x", "stop: {node: t-001}\n    start: {node: t-001}"),
     "timeline[0]: a step has exactly one of"),
    ("name: x\nconfig: {lifecycle: {heartbeat_timeot: 1s}}\ntimeline: [{wait: 1s}]\n",
     "config.lifecycle: Object contains unknown field `heartbeat_timeot`"),
    ("name: x\nfleet: [{count: 2, class: secret}]\ntimeline: [{wait: 1s}]\n",
     "fleet[0].class: Invalid enum value 'secret'"),
    ("fleet: []\n", "Object missing required field `name`"),
    ("name: x\ntimeline: [{assert: {node: a, state: READY, timeout: 1s}}]\n",
     "timeline[0].assert.timeout: only wait_for waits"),
    ("name: [x\n", "not valid YAML"),
])
def test_cli_bad_scenario_exits_2_with_the_key_path(tmp_path: Path, text: str,
                                                    message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = herd("sim", str(path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: {path}: ") and message in line, line


def test_cli_missing_file_exits_2(tmp_path: Path) -> None:
    result = herd("sim", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "No such file" in result.stderr


def test_cli_runs_a_bundled_scenario_by_name() -> None:
    result = herd("sim", "gpu-failure", "--seed", "1", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "PASS gpu-failure" in result.stdout


def test_cli_an_unknown_name_lists_the_bundled_scenarios() -> None:
    result = herd("sim", "gpu-falure")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "gpu-falure: No such file, nor a scenario shipped with herdbook" in line
    assert "gpu-failure" in line and "cordon-drain" in line


async def test_short_chaos_run_detects_every_failure() -> None:
    options = ChaosOptions(nodes=20, rate=6000.0, duration=3.0, seed=12,
                           mix={"xid": 1, "partition": 1, "stop": 1, "ecc_dbe": 1},
                           heartbeat_interval=0.2, heartbeat_timeout=1.0, grace_period=1.0)
    result = await run_chaos(options)
    print(f"chaos seed {result.seed}: {result.injected}, latency {result.latency}")
    assert result.failure is None, result.failure
    total = sum(result.injected.values())
    assert total >= 3 and result.detected == total
    assert result.false_alarms == [] and result.missed == []
    assert result.latency["max"] is not None and result.latency["max"] < 3.0
    # the same seed plans the same failures
    again = await run_chaos(options)
    assert [(i["node"], i["kind"]) for i in again.injections] == [
        (i["node"], i["kind"]) for i in result.injections]


async def test_short_lightweight_chaos_run() -> None:
    options = ChaosOptions(nodes=300, rate=300.0, duration=3.0, seed=4, lightweight=True,
                           mix={"xid": 1, "partition": 1},
                           heartbeat_interval=0.3, heartbeat_timeout=1.5, grace_period=1.5)
    result = await run_chaos(options)
    assert result.failure is None, result.failure
    assert sum(result.injected.values()) >= 2
    assert result.detected == sum(result.injected.values()) and not result.false_alarms
