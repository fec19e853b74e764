"""A pure rule's answer on a check result is kept (``Policy._classify_check``, issue 32: the
classifier ran 22 CEL programs on every healthy report's checks). Kept only for rules that
name no ``history.*``; a history rule still runs every time, since the node's past moves
its answer; and for every check result and policy the kept answers give the verdict a
fresh policy gives."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from herdbook.events.health_report import CheckResult, HealthReport
from herdbook.health.fault_history import NodeFaults, Pull
from herdbook.health.policy import Policy
from herdbook.health.policy_fields import event_guard, names_history

POLICY_YAML = """
version: 1
rules:
  - name: hot
    condition: event.kind == "check" && event.status == "degraded"
    result: degraded
  - name: pulled-twice
    condition: event.kind == "check" && event.name == "gpu" && history.max_gpu_pulls(duration("168h")) >= 2
    result: unhealthy
  - name: failed
    condition: event.kind == "check" && event.status == "unhealthy" && event.message != "ok"
    result: unhealthy
"""


class Counting:
    """A rule's program, counting its runs."""

    def __init__(self, program: Any) -> None:
        self.program = program
        self.runs = 0

    def execute(self, context: Any) -> Any:
        self.runs += 1
        return self.program.execute(context)


def counted(policy: Policy) -> tuple[Policy, list[Counting]]:
    programs = [Counting(rule.program) for rule in policy.rules]
    return Policy([replace(rule, program=p) for rule, p in zip(policy.rules, programs,
                                                                strict=True)]), programs


def report(*checks: CheckResult) -> HealthReport:
    return HealthReport(report_id="r", node_id="gpu-1", boot_id="b", sent_at=0.0, checks=checks)


def pulled(times: int) -> NodeFaults:
    pulls = {"S1": [Pull(at=0.0, node_id="gpu-1", boot_id=f"b{i}") for i in range(times)]}
    return NodeFaults((), pulls, {0: "S1"}, 10.0)  # type: ignore[arg-type]


def test_names_history_finds_a_call_and_not_a_field_named_history() -> None:
    assert names_history('history.xid_count(event.gpu, 79, duration("24h")) >= 3')
    assert not names_history('event.kind == "check" && event.history == "x"')
    assert not names_history('event.message == "history"')


def test_a_healthy_check_runs_only_the_history_rule_the_second_time() -> None:
    policy, (hot, history_rule, failed) = counted(Policy.parse(POLICY_YAML))
    healthy = report(CheckResult(name="gpu", status="healthy"))
    for _ in range(3):
        assert policy.classify(healthy).result == "healthy"
    assert (hot.runs, history_rule.runs, failed.runs) == (1, 3, 1)


def test_the_history_rule_still_follows_the_nodes_past() -> None:
    policy = Policy.parse(POLICY_YAML)
    healthy = report(CheckResult(name="gpu", status="healthy"))
    assert policy.classify(healthy, pulled(0)).result == "healthy"
    assert policy.classify(healthy, pulled(2)).result == "unhealthy"
    assert policy.classify(healthy, pulled(1)).result == "healthy"


CHECKS = st.builds(CheckResult, name=st.sampled_from(["gpu", "boot", "nvlink"]),
                   status=st.sampled_from(["healthy", "degraded", "unhealthy"]),
                   message=st.sampled_from(["", "ok", "hot"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(CHECKS, min_size=1, max_size=3), st.integers(0, 3)),
                max_size=12))
def test_kept_answers_give_a_fresh_policys_verdict(
        reports: list[tuple[list[CheckResult], int]]) -> None:
    kept = Policy.parse(POLICY_YAML)
    for checks, pulls in reports:
        fresh = Policy.parse(POLICY_YAML).classify(report(*checks), pulled(pulls))
        assert kept.classify(report(*checks), pulled(pulls)) == fresh


def test_a_history_rule_whose_event_operands_fail_never_runs() -> None:
    policy, (_, history_rule, _) = counted(Policy.parse(POLICY_YAML))
    other = report(CheckResult(name="boot", status="healthy"))
    for pulls in (0, 2, 3):
        assert policy.classify(other, pulled(pulls)).result == "healthy"
    assert history_rule.runs == 0          # its guard, event.name == "gpu", answered once


def test_the_default_policy_runs_one_rule_on_a_healthy_report() -> None:
    policy, programs = counted(Policy.load(None))
    healthy = report(CheckResult(name="gpu", status="healthy"),
                     CheckResult(name="health_events", status="healthy", message="0 events"))
    policy.classify(healthy)
    before = sum(p.runs for p in programs)
    policy.classify(healthy)
    assert sum(p.runs for p in programs) - before == 1      # was 44: 22 rules x 2 checks


@pytest.mark.parametrize(("condition", "guard"), [
    ('event.kind == "xid" && event.xid in [13, 31] && history.xid_count(event.gpu, 13, '
     'duration("24h")) >= 3', 'event.kind == "xid" && event.xid in [13, 31]'),
    ('event.message == "a&&b" && history.max_gpu_pulls(duration("1h")) > 0',
     'event.message == "a&&b"'),
    ('event.kind == "a" && (history.max_gpu_pulls(duration("1h")) > 0 || event.gpu == 1)',
     'event.kind == "a"'),
    ('event.kind == "a" || event.kind == "b" && history.max_gpu_pulls(duration("1h")) > 0',
     None),
    ('history.max_gpu_pulls(duration("1h")) > 0 && event.kind == "b"', None),
    ('event.gpu == 0 ? history.max_gpu_pulls(duration("1h")) > 0 : false', None),
])
def test_the_guard_is_the_leading_event_operands_of_a_top_level_and(
        condition: str, guard: str | None) -> None:
    assert event_guard(condition) == guard
