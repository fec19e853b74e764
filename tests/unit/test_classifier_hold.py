"""Transient faults are remembered, and critical is not fatal (issue 26, items 2 and 3).

Given a READY node and the built-in policy, when an agent reports an NVLink error once
and then clean reports every 0.5 s, then the node stays DEGRADED for the policy's hold
after the last occurrence and is HEALTHY on the first report after it; an operator's
uncordon ends the hold at once. A ``critical`` verdict is UNHEALTHY with ``level``
critical, ``fatal`` false and a reason saying ``critical:``. The clock is the reports'
stored times, passed in. Pure (the classifier over the fake store)."""

from __future__ import annotations

import msgspec
import pytest

from herdbook.events.codec import decode_event, encode, json_schema
from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeDown,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
)
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.health.fault_hold import DEFAULT_HOLD, FaultHolds, Finding
from herdbook.health.policy import Policy, PolicyError, Verdict
from herdbook.history.causes import label
from herdbook.projector.node_view import NodeView
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.health import decide_health
from herdbook.reactors.intents import decide_uncordon
from tests.fakes import FakeClock, FakeNats, FakeProjector, FakeStore

POLICY = Policy.load(None)
T0 = 1_800_000_000.0      # when HERD_HEALTH stored the faulty report (epoch seconds)


def report(*events: GpuEvent, checks: tuple[CheckResult, ...] = ()) -> HealthReport:
    return HealthReport(report_id="r", node_id="n1", boot_id="b", events=events, checks=checks)


NVLINK = report(GpuEvent(kind="nvlink", gpu=1, value=1))
CLEAN = report()


class World:
    def __init__(self, policy: Policy = POLICY, projector: FakeProjector | None = None,
                 store: FakeStore | None = None) -> None:
        self.projector = projector or FakeProjector()
        self.store = store or FakeStore(self.projector)
        clock = FakeClock()
        self.classifier = HealthClassifier(FakeNats(), self.projector,  # type: ignore[arg-type]
                                           policy, 2, clock=clock, runner=DecideRunner(
                                               self.store, self.projector, clock))  # type: ignore[arg-type]
        self.classifier.follow({})
        self.seq = 0

    def ready(self) -> World:
        for event in (NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()),
                      NodeApproved(node_id="n1"),
                      NodeBootChecked(node_id="n1", boot_id="b", passed=True)):
            self.store.fold(event)
        return self

    async def send(self, sent: HealthReport, at: float) -> None:
        self.seq += 1
        await self.classifier.classify(sent, self.seq, at)

    def health(self) -> Health:
        return self.projector.nodes["n1"].health

    def changes(self) -> list[NodeHealthChanged]:
        return [e for e, _ in self.store.appended if isinstance(e, NodeHealthChanged)]


# the hold: a pure fold over stored times -----------------------------------------------


def finding(key: str = "nvlink-errors/nvlink/1", hold: float = 600.0) -> Finding:
    return Finding(key, f"{key.split('/')[0]}: nvlink 1 on GPU 1", "degraded", hold)


def test_a_hold_lasts_its_window_after_the_last_occurrence_and_ends_once() -> None:
    holds = FaultHolds()
    holds.record("n1", [finding()], T0)
    assert [h.until for h in holds.settle("n1", T0 + 599.9).active] == [T0 + 600]
    holds.record("n1", [finding()], T0 + 300)          # it happened again: extended
    assert holds.settle("n1", T0 + 899.9).ended == ()
    ended = holds.settle("n1", T0 + 900)
    assert ended.active == () and [h.reason for h in ended.ended] == [
        "nvlink-errors: nvlink 1 on GPU 1"]
    assert holds.settle("n1", T0 + 901).ended == ()    # said once
    assert "n1" not in holds


def test_a_replayed_older_report_never_shortens_a_hold_and_zero_holds_nothing() -> None:
    holds = FaultHolds()
    holds.record("n1", [finding(hold=600)], T0 + 100)
    holds.record("n1", [finding(hold=600)], T0)        # out of order
    assert holds.settle("n1", T0 + 650).active[0].until == T0 + 700
    holds.record("n2", [finding(hold=0)], T0)
    assert "n2" not in holds
    holds.clear("n1")
    assert holds.settle("n1", T0).active == ()


# the policy: which faults are held, and for how long -----------------------------------


def test_counter_like_faults_are_held_and_conditions_are_not() -> None:
    assert POLICY.hold == DEFAULT_HOLD == 600.0
    verdict = POLICY.classify(report(
        GpuEvent(kind="nvlink", gpu=1, value=1), GpuEvent(kind="pcie", gpu=0, value=3),
        GpuEvent(kind="xid", gpu=2, xid=13), GpuEvent(kind="thermal", gpu=3, value=88),
        checks=(CheckResult(name="gpu", status="degraded"),)))
    assert verdict.result == "degraded"
    assert sorted(f.key for f in verdict.findings) == [
        "nvlink-errors/nvlink/1", "pcie-errors/pcie/0", "recoverable-xid/xid/2"]
    assert {f.hold for f in verdict.findings} == {600.0}
    # an ECC single-bit error matches no rule of the built-in policy: healthy, not held
    assert POLICY.classify(report(GpuEvent(kind="ecc_sbe", value=4))).findings == ()


def test_the_hold_is_set_per_policy_and_per_rule() -> None:
    policy = Policy.parse("version: 1\nhold: 90s\nrules:\n"
                          "  - {name: nvlink, condition: 'event.kind == \"nvlink\"', "
                          "result: degraded, hold: 2h}\n"
                          "  - {name: sbe, condition: 'event.kind == \"ecc_sbe\"', "
                          "result: degraded}\n"
                          "  - {name: pcie, condition: 'event.kind == \"pcie\"', "
                          "result: degraded, hold: 0}\n")
    verdict = policy.classify(report(GpuEvent(kind="nvlink", value=1),
                                     GpuEvent(kind="ecc_sbe", value=9),
                                     GpuEvent(kind="pcie", value=2)))
    assert {f.key.split("/")[0]: f.hold for f in verdict.findings} == {"nvlink": 7200.0,
                                                                       "sbe": 90.0}
    assert policy.summary().endswith("3 rules (3 degraded), hold 1.5m")
    off = Policy.parse("version: v1\nhold: 0\nrules:\n"
                       "  - {name: n, condition: 'event.event_type == \"nvlink\"', "
                       "result: degraded}\n")
    assert off.hold == 0 and off.summary().endswith(", hold off")
    assert off.classify(report(GpuEvent(kind="nvlink", value=1))).findings == ()


@pytest.mark.parametrize(("text", "message"), [
    ("version: 1\nhold: soon\nrules: []\n", "policy: hold: invalid duration 'soon'"),
    ("version: 1\nhold: -5\nrules: []\n", "policy: hold: invalid duration -5"),
    ("version: 1\nrules:\n  - {name: a, condition: 'true', result: degraded, hold: 1y}\n",
     "policy: rule 'a': hold: invalid duration '1y'"),
])
def test_a_bad_hold_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(PolicyError) as refused:
        Policy.parse(text)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


# the decider: a hold keeps DEGRADED, never makes it -------------------------------------


def node(health: Health) -> NodeView:
    return NodeView(id="n1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=health, version=4)


def test_a_hold_keeps_a_degraded_node_and_never_degrades_another() -> None:
    held = Verdict("healthy", (), held=("nvlink-errors: nvlink 1 on GPU 1",))
    assert decide_health(node(Health.DEGRADED), held, 0, 2) == ([], 0)
    # a node the operator cleared (UNKNOWN) or already HEALTHY is HEALTHY on a clean report
    [cleared], _ = decide_health(node(Health.UNKNOWN), held, 0, 2)
    assert isinstance(cleared, NodeHealthChanged) and cleared.health is Health.HEALTHY
    assert decide_health(node(Health.HEALTHY), held, 0, 2) == ([], 0)
    # the hold ended: HEALTHY, saying which
    ended = Verdict("healthy", (), ended=("nvlink-errors: nvlink 1 on GPU 1",))
    [back], _ = decide_health(node(Health.DEGRADED), ended, 0, 2)
    assert isinstance(back, NodeHealthChanged) and back.health is Health.HEALTHY
    assert back.reason == "all checks pass; hold ended: nvlink-errors: nvlink 1 on GPU 1"
    assert back.level == "healthy"


# the classifier: one NVLink error, then clean reports every 0.5 s -----------------------


async def test_one_nvlink_error_holds_degraded_for_the_window_then_healthy() -> None:
    world = World().ready()
    await world.send(NVLINK, T0)
    [degraded] = world.changes()
    assert (degraded.health, degraded.level, degraded.fatal) == (Health.DEGRADED, "degraded",
                                                                 False)
    assert degraded.reason == ("nvlink-errors: nvlink 1 on GPU 1; held 10m after the last "
                               "occurrence")
    # every clean report within the window keeps it: 1199 of them at 0.5 s
    for n in range(1, 1200):
        await world.send(CLEAN, T0 + n * 0.5)
    assert world.health() is Health.DEGRADED and world.changes() == [degraded]
    # the first report at the end of the window ends the hold
    await world.send(CLEAN, T0 + 600)
    assert world.health() is Health.HEALTHY
    healthy = world.changes()[-1]
    assert healthy.reason == "all checks pass; hold ended: nvlink-errors: nvlink 1 on GPU 1"
    assert healthy.report_seq == world.seq


async def test_a_new_occurrence_extends_the_hold() -> None:
    world = World().ready()
    await world.send(NVLINK, T0)
    await world.send(CLEAN, T0 + 300)
    await world.send(NVLINK, T0 + 400)
    await world.send(CLEAN, T0 + 999)
    assert world.health() is Health.DEGRADED
    await world.send(CLEAN, T0 + 1000)
    assert world.health() is Health.HEALTHY


async def test_a_condition_is_not_held() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="thermal", gpu=0, value=88)), T0)
    assert world.health() is Health.DEGRADED
    await world.send(CLEAN, T0 + 0.5)          # it cooled down: the clearing is news
    assert world.health() is Health.HEALTHY


async def test_an_operator_uncordon_ends_the_hold_at_once() -> None:
    world = World().ready()
    await world.send(NVLINK, T0)
    view = world.projector.nodes["n1"]
    world.store.fold(decide_uncordon(view, "op", "reseated the NVLink bridge"))
    assert world.health() is Health.UNKNOWN and "n1" not in world.classifier.holds
    await world.send(CLEAN, T0 + 0.5)
    assert world.health() is Health.HEALTHY
    assert world.changes()[-1].reason == "all checks pass"


async def test_an_uncordon_of_a_cordoned_degraded_node_clears_its_hold_too() -> None:
    world = World().ready()
    await world.send(NVLINK, T0)
    world.store.fold(NodeCordoned(node_id="n1", actor="op"))
    world.store.fold(NodeUncordoned(node_id="n1", actor="op"))
    await world.send(CLEAN, T0 + 1)
    assert world.health() is Health.HEALTHY


async def test_a_restarted_classifier_holds_what_it_replayed() -> None:
    world = World().ready()
    await world.send(NVLINK, T0)
    await world.send(CLEAN, T0 + 10)
    decided = dict(world.classifier.decided)
    # the control plane restarts: a new classifier over the same log and view
    restarted = World(projector=world.projector, store=world.store)
    restarted.classifier.follow(decided)
    restarted.seq = 0
    await restarted.send(NVLINK, T0)            # replayed: decided already
    await restarted.send(CLEAN, T0 + 10)
    await restarted.send(CLEAN, T0 + 20)        # new: still within the hold
    assert world.health() is Health.DEGRADED and len(world.changes()) == 1
    await restarted.send(CLEAN, T0 + 600)
    assert world.health() is Health.HEALTHY


# critical is not fatal -----------------------------------------------------------------


async def test_a_critical_verdict_says_critical_and_is_not_fatal() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="xid", gpu=1, xid=43)), T0)
    [critical] = world.changes()
    assert (critical.health, critical.level, critical.fatal) == (Health.UNHEALTHY, "critical",
                                                                 False)
    assert critical.reason == "critical: critical-xid: XID 43 on GPU 1"
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.READY
    assert [type(e) for e, _ in world.store.appended] == [NodeHealthChanged]
    assert label(critical, "n1") == "node.health_changed (critical)"


async def test_a_fatal_verdict_says_fatal_and_takes_the_node_down() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="xid", gpu=1, xid=79)), T0)
    [fatal] = world.changes()
    assert (fatal.level, fatal.fatal) == ("fatal", True)
    assert fatal.reason == "fatal: gpu-lost: XID 79 on GPU 1"
    assert [type(e) for e, _ in world.store.appended] == [NodeHealthChanged, NodeDown]
    assert label(fatal, "n1") == "node.health_changed (fatal)"


async def test_the_unhealthy_threshold_has_its_own_level() -> None:
    world = World().ready()
    failed = report(checks=(CheckResult(name="gpu", status="unhealthy"),))
    await world.send(failed, T0)
    await world.send(failed, T0 + 0.5)
    [unhealthy] = world.changes()
    assert (unhealthy.level, unhealthy.fatal) == ("unhealthy", False)


def test_the_level_is_on_the_wire_and_older_events_read_without_it() -> None:
    event = NodeHealthChanged(node_id="n1", health=Health.UNHEALTHY, level="critical")
    wire = msgspec.json.decode(encode(event))
    assert (wire["level"], wire["fatal"]) == ("critical", False)
    del wire["level"]                       # as written before issue 26
    older = decode_event(msgspec.json.encode(wire))
    assert isinstance(older, NodeHealthChanged) and older.level is None
    schema = json_schema()["$defs"]["NodeHealthChanged"]["properties"]["level"]
    assert {"enum": ["critical", "degraded", "fatal", "healthy", "unhealthy"]} in (
        schema["anyOf"])
    # an older fatal event reads as it was written
    assert label(NodeHealthChanged(node_id="n1", health=Health.UNHEALTHY, fatal=True),
                 "n1") == "node.health_changed (fatal)"
