"""The CEL health policy and the health decider: pure, no server."""

from __future__ import annotations

import msgspec
import pytest

from herdbook.agent.fake_nvml import FakeNvml
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeDown
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.health.policy import Policy, PolicyError, Verdict
from herdbook.projector.node_view import NodeView
from herdbook.reactors.health import decide_health
from tests.fakes import FakeClock

POLICY = Policy.load(None)


def report(*events: GpuEvent, checks: tuple[CheckResult, ...] = ()) -> HealthReport:
    return HealthReport(report_id="r-1", node_id="gpu-1", boot_id="b", events=events,
                        checks=checks)


@pytest.mark.parametrize(("event", "expected"), [
    (GpuEvent(kind="xid", xid=79), "fatal"),
    (GpuEvent(kind="ecc_dbe", value=1), "fatal"),
    *[(GpuEvent(kind="xid", xid=x), "critical") for x in (43, 48, 63)],   # issue 16
    *[(GpuEvent(kind="xid", xid=x), "degraded") for x in (13, 31, 45, 64, 92, 94)],
    (GpuEvent(kind="xid", xid=999), "healthy"),
    (GpuEvent(kind="thermal", value=95), "unhealthy"),
    (GpuEvent(kind="thermal", value=94.9), "degraded"),
    (GpuEvent(kind="thermal", value=85), "degraded"),
    (GpuEvent(kind="thermal", value=84), "healthy"),
    (GpuEvent(kind="nvlink", value=3), "degraded"),
    (GpuEvent(kind="pcie", value=1), "degraded"),
    (GpuEvent(kind="ecc_sbe", value=120), "healthy"),
])
def test_default_policy(event: GpuEvent, expected: str) -> None:
    assert POLICY.classify(report(event)).result == expected


def test_the_worst_result_across_events_and_checks_wins() -> None:
    verdict = POLICY.classify(report(
        GpuEvent(kind="xid", xid=13, gpu=2), GpuEvent(kind="thermal", value=96, gpu=1),
        checks=(CheckResult(name="gpu", status="healthy"),)))
    assert verdict.result == "unhealthy"
    assert verdict.reasons[0] == "thermal-critical: 96°C on GPU 1"
    failed = POLICY.classify(report(checks=(CheckResult(name="gpu", status="unhealthy",
                                                        message="NVML call failed"),)))
    assert failed.result == "unhealthy"


def test_the_first_matching_rule_wins() -> None:
    policy = Policy.parse("version: 1\nrules:\n"
                          "  - {name: a, condition: 'event.xid == 13', result: fatal}\n"
                          "  - {name: b, condition: 'event.xid == 13', result: degraded}\n")
    assert policy.classify_event({"kind": "xid", "xid": 13}) == ("fatal", "a")


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\nrules:\n  - {name: broken, condition: 'event.kind ==', result: fatal}\n",
     "rule 'broken': Failed to parse"),
    ("version: 1\nrules:\n  - {name: odd, condition: 'true', result: terrible}\n",
     "rule 'odd': result 'terrible'"),
    ("version: 2\nrules: []\n", "version 2"),
    ("rules: []\n", "version"),
])
def test_bad_policies_are_refused_with_the_rule_and_the_reason(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.parse(text)


def node(health: Health = Health.HEALTHY, lifecycle: Lifecycle = Lifecycle.READY) -> NodeView:
    return NodeView(id="gpu-1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=lifecycle, health=health, version=9)


def test_a_fatal_event_is_unhealthy_and_down_at_once() -> None:
    events, _ = decide_health(node(), Verdict("fatal", ("fatal-xid: XID 79",)), 0, 2, "r-9")
    assert [type(e) for e in events] == [NodeHealthChanged, NodeDown]
    # the cause chain: report r-9 -> classified fatal -> DOWN
    classified, down_event = events
    assert classified.causation_id == "r-9"
    assert down_event.causation_id == classified.event_id
    down, _ = decide_health(node(Health.UNHEALTHY, Lifecycle.DOWN), Verdict("fatal", ()), 0, 2)
    assert down == []


def test_unhealthy_after_the_threshold_only() -> None:
    bad = Verdict("unhealthy", ("critical-xid: XID 48",))
    first, count = decide_health(node(), bad, 0, 2)
    assert first == [] and count == 1
    second, count = decide_health(node(), bad, count, 2)
    assert [msgspec.structs.asdict(e)["health"] for e in second] == [Health.UNHEALTHY]
    _, reset = decide_health(node(), Verdict("healthy", ()), count, 2)
    assert reset == 0


def test_unhealthy_is_sticky() -> None:
    assert decide_health(node(Health.UNHEALTHY), Verdict("healthy", ()), 0, 2)[0] == []
    [event], _ = decide_health(node(Health.UNKNOWN), Verdict("healthy", ()), 0, 2)
    assert isinstance(event, NodeHealthChanged) and event.health is Health.HEALTHY
    [event], _ = decide_health(node(), Verdict("degraded", ("x",)), 0, 2)
    assert isinstance(event, NodeHealthChanged) and event.health is Health.DEGRADED


def test_the_agent_monitor_reports_injected_faults_once() -> None:
    nvml = FakeNvml(count=4, seed="n")
    monitor = HealthMonitor(nvml, clock=FakeClock())
    assert POLICY.classify(monitor.report("n", "b", 0.0)).result == "healthy"
    nvml.inject("xid", 3, 79)
    nvml.inject("ecc-sbe", 1, 120)
    first = monitor.report("n", "b", 0.0)
    kinds = sorted((e.kind, e.gpu) for e in first.events)
    assert kinds == [("ecc_sbe", 1), ("xid", 3)]
    assert POLICY.classify(first).result == "fatal"
    # GPU 3 fell off the bus: the GPU check itself now fails
    assert first.checks[0].status == "unhealthy"
    nvml.inject("clear")
    assert monitor.report("n", "b", 0.0).events == ()
    assert monitor.totals() == (120, 0)
    with pytest.raises(ValueError, match="unknown fault"):
        nvml.inject("meltdown")


def test_a_reading_a_gpu_lacks_is_skipped_not_a_failed_check_nor_hiding_the_others() -> None:
    # GPU 0: a PCIe card without NVLink, ECC or a power sensor (NVML: NOT_SUPPORTED)
    nvml = FakeNvml(count=3, seed="n")
    nvml.gpus[0].unsupported = {"nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetTotalEccErrors",
                                "nvmlDeviceGetPowerUsage"}
    monitor = HealthMonitor(nvml, clock=FakeClock())
    nvml.inject("pcie", 0, 3)
    nvml.inject("ecc-sbe", 1, 5)
    nvml.inject("nvlink", 2, 1)
    report = monitor.report("n", "b", 0.0)
    assert sorted((e.kind, e.gpu) for e in report.events) == [
        ("ecc_sbe", 1), ("nvlink", 2), ("pcie", 0)]
    check = report.checks[0]
    assert check.status == "healthy", check.message
    assert "power_w" not in check.metrics["0"] and "temperature_c" in check.metrics["0"]
    assert check.metrics["1"]["power_w"] > 0
    assert POLICY.classify(report).result != "fatal"
