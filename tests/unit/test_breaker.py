"""The circuit breaker's pure core: given the node view and the breaker's past events,
when an automatic action is about to take a node out, then held or not (and why)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from msgspec.structs import replace

from herdbook.config import BreakerConfig
from herdbook.events.base import Event
from herdbook.events.breaker_events import BreakerReset, BreakerTripped, HeldAction, NodeActionHeld
from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeConformanceChanged, NodeDrainStarted, NodeInfo
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeClass, NodeType
from herdbook.events.store import ConflictError
from herdbook.health.policy import Policy
from herdbook.projector.node_view import NodeView
from herdbook.reactors.breaker import Breaker, BreakerFold
from herdbook.reactors.breaker_deciders import (
    BreakerGate,
    BreakerState,
    Hold,
    check,
    decide_reset,
    decide_trip,
    fold,
    held_instead,
    limit_of,
    tally,
)
from herdbook.reactors.classifier import decide_on_report
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.pool_deciders import plan_pool
from herdbook.reactors.sensitive import Expectation, decide_node_conformance
from tests.fakes import FakeClock

CONFIG = BreakerConfig()   # 10 %, 1h, at least 2
CLOCK = FakeClock()
NOW = CLOCK.now()


def node(i: int, pool: str = "", health: Health = Health.HEALTHY,
         health_at: datetime | None = None, **kw: object) -> NodeView:
    labels = {"pool": pool} if pool else {}
    return NodeView(id=f"n{i}", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=health, health_at=health_at,
                    info=NodeInfo(labels=labels), version=i + 1, **kw)  # type: ignore[arg-type]


def stamped(event: NodeActionHeld) -> NodeActionHeld:
    """As the runner stores it: at the decision's time."""
    return replace(event, at=NOW)


def fleet(size: int, out: int, at: datetime = NOW, pool: str = "") -> list[NodeView]:
    return [node(i, pool, Health.UNHEALTHY if i < out else Health.HEALTHY,
                 at if i < out else None) for i in range(size)]


def test_the_limit_is_the_share_with_a_floor_for_tiny_fleets() -> None:
    assert [limit_of(n, CONFIG) for n in (0, 3, 20, 29, 30, 40, 100)] == [2, 2, 2, 2, 3, 4, 10]


def test_one_take_out_past_the_share_is_held_with_the_numbers() -> None:
    nodes = fleet(40, 4)
    assert check(node(39), fleet(40, 3), BreakerState(), NOW, CONFIG) is None
    hold = check(node(39), nodes, BreakerState(), NOW, CONFIG)
    assert hold is not None and hold.tally.scope == "fleet"
    assert hold.reason == ("breaker open (fleet): 4 of 40 nodes (10%) taken out automatically "
                           "in 1h, limit 4 (10%)")


def test_take_outs_before_the_window_do_not_count() -> None:
    old = fleet(40, 4, at=NOW - timedelta(hours=2))
    assert check(node(39), old, BreakerState(), NOW, CONFIG) is None


def test_a_node_already_out_is_not_held_again() -> None:
    nodes = fleet(40, 10)
    assert check(nodes[0], nodes, BreakerState(), NOW, CONFIG) is None


def test_a_small_pool_trips_on_its_own_share() -> None:
    nodes = fleet(90, 0) + [node(100 + i, "a", Health.UNHEALTHY if i < 2 else Health.HEALTHY,
                                 NOW if i < 2 else None) for i in range(10)]
    hold = check(node(105, "a"), nodes, BreakerState(), NOW, CONFIG)
    assert hold is not None and hold.tally.scope == "pool:a"
    assert (hold.tally.size, hold.tally.taken_out, hold.tally.limit) == (10, 2, 2)
    assert check(node(50, "b"), nodes, BreakerState(), NOW, CONFIG) is None


def test_trips_and_resets_fold_and_a_reset_restarts_the_count() -> None:
    nodes = fleet(40, 4)
    hold = check(node(39), nodes, BreakerState(), NOW, CONFIG)
    assert hold is not None
    (held,) = held_instead(node(39), HeldAction.UNHEALTHY, hold, "UNHEALTHY", BreakerState())
    decision = decide_trip(BreakerState(), stamped(held), nodes, CONFIG)
    assert decision is not None and decision.expected == 0
    (tripped,) = decision.events
    assert isinstance(tripped, BreakerTripped) and tripped.taken_out == 4 and tripped.size == 40
    assert tripped.reason == hold.reason
    state = fold(BreakerState(), tripped, 7)
    # once per scope: a retried decision, or another replica's, finds the scope open
    assert state.version == 7 and decide_trip(state, stamped(held), nodes, CONFIG) is None

    # open: even a quiet window holds until an operator resets
    assert check(node(39), fleet(40, 0), state, NOW, CONFIG) is not None
    (reset,) = decide_reset(state, "", "checked the driver", "alice").events
    assert isinstance(reset, BreakerReset) and reset.actor == "alice"
    reset = BreakerReset(scope="", reason="checked", at=NOW + timedelta(seconds=1))
    closed = fold(state, reset, 9)
    assert not closed.tripped and closed.version == 9
    # the four taken out before the reset no longer count
    assert check(node(39), nodes, closed, NOW + timedelta(seconds=2), CONFIG) is None
    assert tally(nodes, closed, NOW, CONFIG)["fleet"].taken_out == 0


def test_a_scoped_reset_closes_only_that_scope() -> None:
    state = BreakerState()
    for i, scope in enumerate(("fleet", "pool:a")):
        state = fold(state, BreakerTripped(scope=scope, taken_out=1, size=1, limit=1), i + 1)
    state = fold(state, BreakerReset(scope="pool:a", reason="ok"), 3)
    assert set(state.tripped) == {"fleet"}


def test_an_action_is_held_once_per_node_and_kind_until_a_reset() -> None:
    hold = check(node(39), fleet(40, 4), BreakerState(), NOW, CONFIG)
    assert hold is not None
    (held,) = held_instead(node(39), HeldAction.UNHEALTHY, hold, "UNHEALTHY", BreakerState())
    assert isinstance(held, NodeActionHeld) and held.reason == hold.reason
    already = node(39, held="unhealthy", held_at=NOW)
    assert held_instead(already, HeldAction.UNHEALTHY, hold, "UNHEALTHY", BreakerState()) == []
    assert held_instead(already, HeldAction.DRAIN, hold, "drain", BreakerState()) != []
    after = fold(BreakerState(), BreakerReset(reason="ok", at=NOW + timedelta(seconds=1)), 1)
    assert held_instead(already, HeldAction.UNHEALTHY, hold, "UNHEALTHY", after) != []


def test_a_disabled_breaker_holds_nothing() -> None:
    off = BreakerConfig(enabled=False)
    assert check(node(39), fleet(40, 30), BreakerState(), NOW, off) is None


# the deciders that ask it ----------------------------------------------------------

POLICY = Policy.load(None)


def gate_of(nodes: list[NodeView]) -> BreakerGate:
    return BreakerGate(BreakerState(), {v.id: v for v in nodes}, CONFIG, NOW)


def test_a_fatal_report_past_the_limit_is_held_instead_of_unhealthy_and_down() -> None:
    nodes = fleet(40, 4)
    report = HealthReport(report_id="r", node_id="n39", boot_id="b",
                          events=(GpuEvent(kind="xid", xid=79),))
    decision, count = decide_on_report(nodes[39], POLICY.classify(report), report, 5, 0, 2, 0,
                                       gate_of(nodes))
    assert decision is not None and count == 1
    (held,) = decision.events
    assert isinstance(held, NodeActionHeld) and held.kind is HeldAction.UNHEALTHY
    assert held.would.startswith("UNHEALTHY and DOWN: ")
    # within the limit it goes on
    decision, _ = decide_on_report(nodes[39], POLICY.classify(report), report, 5, 0, 2, 0,
                                   gate_of(fleet(40, 3)))
    assert decision is not None
    assert [type(e).__name__ for e in decision.events] == ["NodeHealthChanged", "NodeDown"]


def test_healthy_reports_are_never_held() -> None:
    nodes = fleet(40, 30)
    report = HealthReport(report_id="r", node_id="n39", boot_id="b", checks=(
        CheckResult(name="gpu", status="degraded", message="warm"),))
    decision, _ = decide_on_report(nodes[39], POLICY.classify(report), report, 5, 0, 2, 0,
                                   gate_of(nodes))
    assert decision is not None
    (changed,) = decision.events
    assert isinstance(changed, NodeHealthChanged) and changed.health is Health.DEGRADED


def test_a_conformance_drain_is_held_and_decided_again_once_allowed() -> None:
    nodes = fleet(40, 4)
    sensitive = NodeView(
        id="s1", type=NodeType.COMPUTE, approval=Approval.APPROVED, lifecycle=Lifecycle.READY,
        info=NodeInfo(node_class=NodeClass.SENSITIVE), fingerprint="good",
        fingerprint_expected="good")
    expectation = Expectation("good", "the pool's expected fingerprint")
    record, held = decide_node_conformance(sensitive, "bad", expectation, gate_of(nodes))
    assert isinstance(record, NodeConformanceChanged) and record.drift
    assert isinstance(held, NodeActionHeld) and held.kind is HeldAction.DRAIN
    # after the hold: drift recorded, the drain held; once the breaker allows, it drains
    later = NodeView(id="s1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                     lifecycle=Lifecycle.READY, info=NodeInfo(node_class=NodeClass.SENSITIVE),
                     fingerprint="bad", fingerprint_expected="good", drift=True,
                     held="drain", held_at=NOW)
    assert decide_node_conformance(later, "bad", expectation, gate_of(nodes)) == []
    (drain,) = decide_node_conformance(later, "bad", expectation, gate_of(fleet(40, 0)))
    assert isinstance(drain, NodeDrainStarted) and drain.causation_id is None
    drained = NodeView(id="s1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                       lifecycle=Lifecycle.READY, intent=Intent.DRAINING,
                       info=NodeInfo(node_class=NodeClass.SENSITIVE), fingerprint="bad",
                       fingerprint_expected="good", drift=True, held="drain", held_at=NOW)
    assert decide_node_conformance(drained, "bad", expectation, gate_of(fleet(40, 0))) == []


def test_hold_reason_names_a_pool_and_an_open_scope() -> None:
    state = fold(BreakerState(), BreakerTripped(scope="pool:a", taken_out=3, size=10, limit=2), 1)
    hold = check(node(1, "a"), [node(i, "a") for i in range(10)], state, NOW, CONFIG)
    assert isinstance(hold, Hold)
    assert hold.reason == ("breaker open (pool:a): 3 of 10 nodes (30%) taken out automatically "
                           "in 1h, limit 2 (20%); held until `herd breaker reset`")


def test_a_replacement_is_held_only_while_a_scope_is_open() -> None:
    nodes = fleet(40, 10)   # far past the share, but the breaker never tripped
    out = nodes[0]
    assert check(out, nodes, BreakerState(), NOW, CONFIG, HeldAction.REPLACE) is None
    state = fold(BreakerState(), BreakerTripped(scope="fleet", taken_out=5, size=40, limit=4), 1)
    hold = check(out, nodes, state, NOW, CONFIG, HeldAction.REPLACE)
    assert hold is not None and hold.tally.open


def test_the_pool_planner_neither_drains_nor_replaces_a_held_node() -> None:
    from tests.unit.test_pools import POOL, inst
    from tests.unit.test_pools import node as pool_node
    nodes = {v.id: v for v in (pool_node(1, health=Health.UNHEALTHY), pool_node(2))}
    plan = plan_pool(POOL, None, [inst(1), inst(2)], nodes, {}, NOW, 600,
                     held=lambda view: view.id == "n1")
    assert (plan.held, plan.replace, plan.terminate, plan.provision) == (["n1"], [], [], 0)
    plan = plan_pool(POOL, None, [inst(1), inst(2)], nodes, {"n1": True}, NOW, 600,
                     held=lambda view: view.id == "n1")
    assert (plan.held, plan.drain) == (["n1"], [])
    plan = plan_pool(POOL, None, [inst(1), inst(2)], nodes, {}, NOW, 600)
    assert plan.replace == ["n1"] and plan.held == []


def test_a_held_action_counts_as_a_detection_in_the_simulator() -> None:
    from herdbook.sim.detections import shows_failure
    assert shows_failure(NodeActionHeld(node_id="n1", kind=HeldAction.UNHEALTHY))


# the trip: from the folded hold, once ---------------------------------------------------

def test_a_hold_from_before_the_scopes_reset_trips_nothing() -> None:
    nodes = fleet(40, 4)
    hold = check(node(39), nodes, BreakerState(), NOW, CONFIG)
    assert hold is not None
    (held,) = held_instead(node(39), HeldAction.UNHEALTHY, hold, "UNHEALTHY", BreakerState())
    reset = fold(BreakerState(), BreakerReset(reason="ok", at=NOW + timedelta(seconds=1)), 3)
    assert decide_trip(reset, stamped(held), nodes, CONFIG) is None
    later = replace(held, at=NOW + timedelta(seconds=2))
    decision = decide_trip(reset, later, nodes, CONFIG)
    assert decision is not None and decision.expected == 3


class Log:
    """The breaker aggregate's stream: an append expecting a stale version conflicts."""

    def __init__(self) -> None:
        self.stored: list[tuple[int, Event]] = []

    async def append(self, event: Event, expected_version: int | None = None) -> int:
        return await self.append_decided([event], expected_version or 0)

    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int:
        if expected_version != await self.last_sequence("breaker", "fleet"):
            raise ConflictError("herd.breaker.fleet.>", expected_version)
        for event in events:
            self.stored.append((len(self.stored) + 1, event))
        return len(self.stored)

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int:
        return len(self.stored)


class LaggingFold(BreakerFold):
    """One replica's fold of the log: behind until asked to catch up."""

    def __init__(self, log: Log) -> None:
        super().__init__(nc=None)  # type: ignore[arg-type]
        self.log = log

    async def wait_applied(self, seq: int, timeout: float = 10.0) -> None:
        for at, event in self.log.stored[self.state.version:seq]:
            assert isinstance(event, BreakerTripped | BreakerReset)
            self.state = fold(self.state, event, at)


async def test_every_replica_folds_the_hold_and_the_scope_trips_once() -> None:
    """Two replicas' breakers fold the same ``node.action_held``, and one of them twice:
    each decides the trip at its fold's version, and one ``breaker.tripped`` is stored
    (the other's append conflicts, it catches up and finds the scope open)."""
    log, nodes = Log(), fleet(40, 4)
    views = {v.id: v for v in nodes}
    replicas = [Breaker(f, views, CONFIG, clock=CLOCK, runner=DecideRunner(log, f, CLOCK))
                for f in (LaggingFold(log), LaggingFold(log))]
    gate = replicas[0].gate(NOW)
    (held,) = gate(node(39), HeldAction.UNHEALTHY, "UNHEALTHY") or []
    assert log.stored == []   # the gate only answers: the trip follows from the fold
    for breaker in (*replicas, replicas[0]):
        breaker.on_node_event("n39", None, stamped(held))
    await asyncio.gather(*(t for b in replicas for t in b._tripping.values()))
    assert [type(e) for _, e in log.stored] == [BreakerTripped]
    (_, tripped), = log.stored
    assert isinstance(tripped, BreakerTripped) and (tripped.scope, tripped.taken_out) == (
        "fleet", 4)
    assert all(b.held == n for b, n in zip(replicas, (2, 1), strict=True))
    # open now: a later hold decides nothing more
    await replicas[1].fold.wait_applied(1)
    replicas[1].on_node_event("n38", None, stamped(held))
    assert not replicas[1]._tripping and len(log.stored) == 1
