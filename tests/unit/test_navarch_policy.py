"""Navarch policy files work unchanged (issue 16): a ``version: v1`` policy with
metadata, descriptions, ``//`` comments, multi-line conditions, ``has(...)`` and a final
``condition: "true"`` default is taken as is; given READY nodes, when reports arrive at
the health classifier (tests/fakes.py), then its verdicts follow the policy's rules over
Navarch's event shape. herdbook's own format keeps working, told apart by ``version``;
``herd health check-policy`` accepts both."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from herdbook.cli.health import health_app
from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeApproved, NodeBootChecked, NodeDown, NodeInfo, NodeRegistered
from herdbook.events.states import Health, Lifecycle
from herdbook.health.default_policy import DEFAULT_POLICY_YAML
from herdbook.health.navarch import event_fields
from herdbook.health.policy import Policy, PolicyError, PolicyFormat
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from tests.fakes import FakeClock, FakeNats, FakeProjector, FakeStore

NAVARCH_POLICY = """\
# A Navarch health policy, as an operator brings it
version: v1

metadata:
  name: training-fleet
  description: GPU health for the training pools

rules:
  # Fatal XID errors - unrecoverable, triggers node replacement
  - name: fatal-xid
    description: XID errors indicating unrecoverable GPU failure
    condition: |
      event.event_type == "xid" && event.metrics.xid_code in [
        43,   // GPU stopped processing
        48,   // Double Bit ECC Error
        63,   // ECC page retirement or row remapping event
        79    // GPU has fallen off the bus
      ]
    result: unhealthy

  - name: recoverable-xid
    description: XID errors that may recover without node replacement
    condition: event.event_type == "xid"
    result: degraded

  # DBE seen by DCGM's memory watch (the event type is not looked at here)
  - name: ecc-dbe
    description: Uncorrectable ECC errors in GPU memory
    condition: |
      event.system == "DCGM_HEALTH_WATCH_MEM" &&
      has(event.metrics.ecc_dbe_count) &&
      event.metrics.ecc_dbe_count > 0
    result: unhealthy

  - name: thermal-critical
    description: GPU temperature at critical threshold
    condition: |
      event.event_type == "thermal" &&
      has(event.metrics.temperature) &&
      event.metrics.temperature >= 95
    result: unhealthy

  - name: thermal-warning
    condition: >-
      event.event_type == "thermal" && has(event.metrics.temperature)
      && event.metrics.temperature >= 85
    result: degraded

  - name: pcie-on-a-known-bad-slot
    condition: event.event_type == "pcie" && event.gpu_index == 7 && event.message != ""
    result: degraded

  # Default - no matching rule means healthy
  - name: default
    description: No issues detected
    condition: "true"
    result: healthy
"""


def report(node: str, *events: GpuEvent, checks: tuple[CheckResult, ...] = ()) -> HealthReport:
    return HealthReport(report_id=f"r-{node}", node_id=node, boot_id="b", events=events,
                        checks=(CheckResult(name="gpu", status="healthy"), *checks))


class World:
    def __init__(self, policy: Policy, nodes: list[str], threshold: int = 2) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        clock = FakeClock()
        self.classifier = HealthClassifier(FakeNats(), self.projector,  # type: ignore[arg-type]
                                           policy, threshold, clock=clock, runner=DecideRunner(
                                               self.store, self.projector, clock))  # type: ignore[arg-type]
        self.classifier.follow({})
        self.seq = 0
        for node in nodes:
            for event in (NodeRegistered(node_id=node, boot_id="b", info=NodeInfo()),
                          NodeApproved(node_id=node),
                          NodeBootChecked(node_id=node, boot_id="b", passed=True)):
                self.store.fold(event)

    async def send(self, report: HealthReport) -> None:
        self.seq += 1
        await self.classifier.classify(report, self.seq)

    def health(self, node: str) -> Health:
        return self.projector.nodes[node].health

    def reason(self, node: str) -> str:
        return self.projector.nodes[node].health_reason


@pytest.fixture
def navarch() -> Policy:
    return Policy.parse(NAVARCH_POLICY, "navarch.yaml")


async def test_the_classifier_follows_a_navarch_policy_as_is(navarch: Policy) -> None:
    assert navarch.format is PolicyFormat.NAVARCH and navarch.name == "training-fleet"
    world = World(navarch, ["fatal", "hot", "warm", "dbe", "xid13", "pcie", "fine"])
    await world.send(report("fatal", GpuEvent(kind="xid", gpu=3, xid=43)))
    await world.send(report("hot", GpuEvent(kind="thermal", gpu=1, value=96)))
    await world.send(report("warm", GpuEvent(kind="thermal", gpu=1, value=88)))
    await world.send(report("dbe", GpuEvent(kind="ecc_dbe", gpu=5, value=2)))
    await world.send(report("xid13", GpuEvent(kind="xid", gpu=0, xid=13)))
    await world.send(report("pcie", GpuEvent(kind="pcie", gpu=7, value=4)))
    await world.send(report("fine", GpuEvent(kind="ecc_sbe", gpu=2, value=3),
                            GpuEvent(kind="nvlink", gpu=2, value=1)))
    # Navarch's "unhealthy" acts on one report, as in Navarch
    assert world.health("fatal") is Health.UNHEALTHY
    # ... as herdbook's critical: UNHEALTHY, not DOWN, and said so (issue 26)
    assert world.reason("fatal") == "critical: fatal-xid: XID 43 on GPU 3"
    assert world.health("hot") is Health.UNHEALTHY
    assert "thermal-critical: 96°C on GPU 1" in world.reason("hot")
    assert world.health("warm") is Health.DEGRADED
    assert world.health("dbe") is Health.UNHEALTHY
    assert world.reason("dbe").endswith("ecc-dbe: ecc_dbe 2 on GPU 5")
    assert world.health("xid13") is Health.DEGRADED
    assert world.reason("xid13") == ("recoverable-xid: XID 13 on GPU 0; held 10m after the "
                                     "last occurrence")
    assert world.health("pcie") is Health.DEGRADED
    assert world.health("fine") is Health.HEALTHY     # the default rule
    # UNHEALTHY, not DOWN: a Navarch policy has no result that takes a node down
    assert not [e for e, _ in world.store.appended if isinstance(e, NodeDown)]
    assert world.projector.nodes["fatal"].lifecycle is Lifecycle.READY


async def test_failed_checks_count_toward_the_threshold_under_a_navarch_policy(
        navarch: Policy) -> None:
    world = World(navarch, ["n1"], threshold=2)
    failed = CheckResult(name="boot", status="unhealthy", message="NVML call failed")
    await world.send(report("n1", checks=(failed,)))
    assert world.health("n1") is not Health.UNHEALTHY      # the default rule cannot hide it,
    await world.send(report("n1", checks=(failed,)))      # and one is not enough
    assert world.health("n1") is Health.UNHEALTHY
    changed = [e for e, _ in world.store.appended if isinstance(e, NodeHealthChanged)]
    assert "2 consecutive unhealthy reports: failed-check: boot check unhealthy" in \
        changed[-1].reason


def test_the_event_has_navarch_s_shape() -> None:
    event = event_fields(GpuEvent(kind="ecc_dbe", gpu=5, value=2), sent_at=0.0)
    assert {k: event[k] for k in ("event_type", "gpu_index", "system", "metrics")} == {
        "event_type": "ecc_dbe", "gpu_index": 5, "system": "DCGM_HEALTH_WATCH_MEM",
        "metrics": {"ecc_sbe_count": 0, "ecc_dbe_count": 2}}
    assert event["message"] == "ecc_dbe 2 on GPU 5"
    assert event["timestamp"] == "1970-01-01T00:00:00Z"
    assert event_fields(GpuEvent(kind="xid", xid=79))["metrics"] == {"xid_code": 79}
    assert event_fields(GpuEvent(kind="thermal", value=91))["metrics"] == {"temperature": 91}


def test_the_format_is_told_by_its_version() -> None:
    assert Policy.load(None).format is PolicyFormat.HERDBOOK
    herdbook = Policy.parse("version: 1\nrules:\n"
                            "  - {name: a, condition: 'event.xid == 43', result: critical}\n")
    assert herdbook.format is PolicyFormat.HERDBOOK
    assert herdbook.classify(report("n", GpuEvent(kind="xid", xid=43))).result == "critical"
    with pytest.raises(PolicyError, match="version v2 is not supported"):
        Policy.parse("version: v2\nrules: []\n")


@pytest.mark.parametrize(("text", "message"), [
    ("version: v1\nrules: []\n", "at least one rule"),
    ("version: v1\nrules:\n  - {name: a, condition: 'true', result: healthy}\n"
     "  - {name: a, condition: 'true', result: healthy}\n", "rule 'a': duplicate rule name"),
    ("version: v1\nrules:\n  - {name: a, condition: '', result: healthy}\n",
     "rule 'a': condition is required"),
    ("version: v1\nrules:\n  - {name: a, condition: 'true', result: broken}\n",
     "result 'broken' is not one of"),
])
def test_navarch_s_own_checks_are_kept(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        Policy.parse(text)


def test_check_policy_prints_one_line_for_either_format(tmp_path: Path) -> None:
    runner = CliRunner()
    navarch = tmp_path / "navarch.yaml"
    navarch.write_text(NAVARCH_POLICY)
    result = runner.invoke(health_app, ["check-policy", str(navarch)])
    assert result.exit_code == 0, result.output
    assert result.output == (f"Ok: {navarch}: Navarch format (version v1) 'training-fleet': "
                             "7 rules (1 healthy, 3 degraded, 3 unhealthy), hold 10m\n")
    herdbook = tmp_path / "herdbook.yaml"
    herdbook.write_text(DEFAULT_POLICY_YAML)
    result = runner.invoke(health_app, ["check-policy", str(herdbook)])
    assert result.exit_code == 0 and result.output.startswith(
        f"Ok: {herdbook}: herdbook format (version 1) 'herdbook-default': 22 rules (")
    bad = tmp_path / "bad.yaml"
    bad.write_text(NAVARCH_POLICY.replace("event.metrics.temperature >= 95", "event.metrics."))
    result = runner.invoke(health_app, ["check-policy", str(bad)])
    assert result.exit_code == 1
    assert "rule 'thermal-critical'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
