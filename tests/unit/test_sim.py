"""The pure parts of `herd sim`: the scenario format, checks, the chaos plan and the
detection tracker (no server)."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import NodeCordoned, NodeDegraded, NodeDown
from herdbook.events.states import Health
from herdbook.sim import checks
from herdbook.sim.chaos import parse_mix, plan_failures
from herdbook.sim.detections import Detections, percentile
from herdbook.sim.scenario import Check, group_ids
from herdbook.sim.scenario_file import ScenarioError, parse_scenario
from herdbook.sim.scenario_run import SimResult
from herdbook.sim.world_run import run_world

BASE = "name: t\nfleet: [{count: 3, prefix: n}]\ntimeline:\n"


def node(state: str = "READY", health: str = "HEALTHY", **extra: Any) -> dict[str, Any]:
    return {"state": state, "lifecycle": "READY" if state in ("READY", "CORDONED") else state,
            "health": health, "intent": "ELIGIBLE", "approval": "APPROVED",
            "schedulable": state == "READY", "labels": extra.pop("labels", {}), **extra}


def check(text: str) -> Check:
    step = parse_scenario(BASE + f"  - assert: {text}\n").timeline[0]
    assert step.assert_ is not None
    return step.assert_


FLEET = ["n-001", "n-002", "n-003"]


# -- the format ---------------------------------------------------------------------

def test_fleet_ids_are_numbered_from_one_and_widen_past_999() -> None:
    scenario = parse_scenario(BASE + "  - wait: 1s\n")
    assert scenario.node_ids() == FLEET
    [group] = parse_scenario("name: t\nfleet: [{count: 1200, prefix: big, lightweight: true}]\n"
                             "timeline: [{wait: 1s}]\n").fleet
    ids = group_ids(group)
    assert ids[0] == "big-0001" and ids[-1] == "big-1200"


def test_durations_parse_like_the_config() -> None:
    scenario = parse_scenario(BASE + "  - wait: 500ms\n  - wait_for: {node: n-001, state: "
                                     "READY, timeout: 2m}\n")
    assert scenario.timeline[0].wait == 0.5
    wait_for = scenario.timeline[1].wait_for
    assert wait_for is not None and wait_for.timeout == 120.0


@pytest.mark.parametrize(("steps", "message"), [
    ("  - {}\n", "timeline[0]: a step has exactly one of"),
    ("  - assert: {count: {state: READY}}\n", "needs equals, at_least or at_most"),
    ("  - assert: {node: n-001}\n", "nothing to check"),
    ("  - assert: {state: READY}\n", "select nodes with node"),
    ("  - assert: {nodes: some, state: READY}\n", "timeline[0].assert.nodes"),
    ("  - assert: {node: n-001, state: READY, equals: 1}\n", "go with count or instances"),
    ("  - inject: {node: n-001, fault: fire}\n", "timeline[0].inject.fault: 'fire'"),
    ("  - inject: {fault: xid, value: 79}\n", "give node or pool"),
    ("  - command: {route: node., id: x}\n", "timeline[0].command.route"),
    ("  - command: {route: node.cordon, expect: maybe}\n", "timeline[0].command.expect"),
    ("  - partition: {node: [n-001, n-009]}\n", "n-009 is not a fleet node"),
])
def test_bad_steps_are_refused_with_the_key_path(steps: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(BASE + steps, "s.yaml")
    assert str(err.value).startswith("s.yaml: ") and message in str(err.value)


def test_duplicate_fleet_nodes_and_an_empty_timeline_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"fleet\[1\]: node n-001 is already"):
        parse_scenario("name: t\nfleet: [{count: 1, prefix: n}, {count: 2, prefix: n}]\n"
                       "timeline: [{wait: 1s}]\n")
    with pytest.raises(ScenarioError, match="timeline: no steps"):
        parse_scenario("name: t\n")


def test_real_agents_per_run_are_capped() -> None:
    with pytest.raises(ScenarioError, match="fleet: 3100 real agents; at most 3000"):
        parse_scenario("name: t\nfleet: [{count: 600, prefix: a}, {count: 2500, prefix: b}]\n"
                       "timeline: [{wait: 1s}]\n")
    parse_scenario("name: t\nfleet: [{count: 600, prefix: a}, {count: 5000, prefix: b, "
                   "lightweight: true}]\ntimeline: [{wait: 1s}]\n")


def test_command_body_is_the_shortcuts_plus_body() -> None:
    step = parse_scenario(BASE + "  - command: {route: node.drain, id: n-001, urgent: true, "
                                 "body: {deadline_s: 60}}\n").timeline[0]
    assert step.command is not None
    assert step.command.request() == {"actor": "sim", "id": "n-001", "urgent": True,
                                      "deadline_s": 60}


# -- checks -------------------------------------------------------------------------

def test_every_selected_node_must_match() -> None:
    nodes = {"n-001": node(), "n-002": node("DOWN", "UNHEALTHY"), "n-003": node()}
    outcome = checks.evaluate(check("{nodes: all, state: READY}"), FLEET, nodes, list)
    assert not outcome.ok
    assert outcome.expected == "every fleet node state=READY"
    assert outcome.found == "n-002 state=DOWN"
    assert checks.evaluate(check("{node: n-002, state: DOWN, health: unhealthy}"), FLEET,
                           nodes, list).ok


def test_a_fleet_node_missing_from_the_view_does_not_match() -> None:
    outcome = checks.evaluate(check("{nodes: all, state: READY}"), FLEET,
                              {"n-001": node()}, list)
    assert outcome.found == "n-002 not in the view, n-003 not in the view"


def test_state_lists_and_aliases() -> None:
    nodes = {"n-001": node("DEGRADED"), "n-002": node("DOWN"), "n-003": node()}
    assert checks.evaluate(check("{nodes: [n-001, n-002], state: disconnected}"), FLEET,
                           nodes, list).ok
    assert checks.evaluate(check("{node: n-003, state: [active, cordoned]}"), FLEET,
                           nodes, list).ok


def test_fields_compare_as_written() -> None:
    nodes = {"n-001": node(claimed_by=None, wipe_steps={"a": "ok"}, gpus=8)}
    assert checks.evaluate(check("{node: n-001, fields: {claimed_by: null, gpus: 8, "
                                 "wipe_steps: {a: ok}}}"), FLEET, nodes, list).ok
    outcome = checks.evaluate(check("{node: n-001, fields: {gpus: 4}}"), FLEET, nodes, list)
    assert not outcome.ok and outcome.found == "n-001 gpus=8"


def test_counts_select_by_pool_and_compare() -> None:
    nodes = {"a": node(labels={"pool": "p"}), "b": node("DOWN", labels={"pool": "p"}),
             "c": node(labels={"pool": "q"})}
    outcome = checks.evaluate(check("{count: {pool: p, state: READY}, equals: 1}"), [],
                              nodes, list)
    assert outcome.ok and outcome.found == "1 (a)"
    outcome = checks.evaluate(check("{count: {state: READY}, at_least: 3}"), [], nodes, list)
    assert not outcome.ok and outcome.expected == "count(nodes state=READY) >= 3"


def test_instance_counts() -> None:
    instances = [{"id": "i1", "pool": "p", "state": "FAILED", "replaces": None},
                 {"id": "i2", "pool": "p", "state": "RUNNING", "replaces": "i0"}]
    outcome = checks.evaluate(check("{instances: {pool: p, replaces: true}, equals: 1}"), [],
                              {}, lambda: instances)
    assert outcome.ok and outcome.found == "1 (i2)"
    outcome = checks.evaluate(check("{instances: {state: [running, failed]}, at_most: 1}"),
                              [], {}, lambda: instances)
    assert not outcome.ok and outcome.found == "2 (i1, i2)"


# -- chaos ----------------------------------------------------------------------------

def test_parse_mix() -> None:
    assert parse_mix("xid=0.5, partition=0.3,stop") == {"xid": 0.5, "partition": 0.3,
                                                         "stop": 1.0}
    for bad in ("fire=1", "xid=lots", "xid=-1", "xid=0", ""):
        with pytest.raises(ValueError, match="--mix"):
            parse_mix(bad)


@given(st.integers(0, 2**31), st.integers(1, 300), st.floats(1, 5000), st.floats(1, 120))
def test_plan_failures_is_seeded_ordered_and_hits_each_node_once(
        seed: int, count: int, rate: float, duration: float) -> None:
    nodes = [f"n{i}" for i in range(count)]
    mix = {"xid": 1.0, "stop": 2.0}
    plan = plan_failures(random.Random(seed), nodes, rate, duration, mix)
    assert plan == plan_failures(random.Random(seed), nodes, rate, duration, mix)
    assert [p.at_s for p in plan] == sorted(p.at_s for p in plan)
    assert all(0 <= p.at_s < duration and p.kind in mix for p in plan)
    assert len({p.node for p in plan}) == len(plan) <= count


def test_plan_rate_is_per_1000_nodes_per_minute() -> None:
    nodes = [f"n{i}" for i in range(10_000)]
    # 60 per 1000 nodes per minute at 10k nodes: 10 per second, ~600 in a minute
    plan = plan_failures(random.Random(1), nodes, 60.0, 60.0, {"xid": 1.0})
    assert 500 < len(plan) < 700


# -- detections -----------------------------------------------------------------------

def test_detections_time_the_first_failure_event_after_an_injection() -> None:
    now = [100.0]
    tracker = Detections(clock=lambda: now[0], started=100.0)
    tracker.on_event("a", None, NodeDegraded(node_id="a", heartbeat_age=3.0))  # unprompted
    now[0] = 101.0
    tracker.injected("b", "partition")
    now[0] = 103.5
    tracker.on_event("b", None, NodeCordoned(node_id="b"))        # not a failure event
    tracker.on_event("b", None, NodeDegraded(node_id="b", heartbeat_age=2.0))
    now[0] = 105.0
    tracker.on_event("b", None, NodeDown(node_id="b"))            # the same failure, later
    tracker.injected("c", "xid 79")
    tracker.on_event("c", None, NodeHealthChanged(node_id="c", health=Health.HEALTHY))
    assert [i.detected is not None for i in tracker.injections] == [True, False]
    [first] = [i for i in tracker.injections if i.node == "b"]
    assert first.detected is not None and first.detected.latency_s == 2.5
    assert first.detected.event == "node.degraded"
    assert [d.node for d in tracker.unprompted()] == ["a"]
    assert [d.injected for d in tracker.detections] == [None, "partition", "(follow-up)"]
    assert [i.node for i in tracker.pending()] == ["c"]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([1.0, 2.0], 50) == 1.0



async def test_a_world_that_does_not_start_is_reported_and_its_data_dir_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`herd sim` (chaos and scenario alike, through run_world): a world that does not
    start (here bootstrap refuses its health policy) is exit 3 with one line, never a
    traceback; the mode's body never runs; a temporary data dir goes, a given one stays."""
    bad = {"health": {"policy": str(tmp_path / "missing.toml")}}
    given = tmp_path / "run"
    result = await run_world(SimResult(scenario="bad", source="", seed=1), bad, [], given,
                             lambda world: pytest.fail("the body ran"))
    assert result.exit_code == 3 and result.startup_s == 0.0
    assert result.failure is not None and "\n" not in result.failure
    assert result.failure.startswith("the simulated control plane did not start: ")
    assert given.is_dir()
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    again = await run_world(SimResult(scenario="bad", source="", seed=1), bad, [], None,
                            lambda world: pytest.fail("the body ran"))
    assert again.exit_code == 3 and list(temporary.iterdir()) == []
