"""The health classifier through the decide runner: given a node's past events (and the
reports already decided on), when a report arrives, then these appended events. Its
position commits with what it decides, so reprocessing a report changes nothing."""

from __future__ import annotations

from herdbook.events.health_report import (
    CheckResult,
    GpuEvent,
    HealthReport,
    NodeHealthChanged,
)
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeDown,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
)
from herdbook.events.states import Health, Lifecycle
from herdbook.health.policy import Policy
from herdbook.reactors.classifier import HealthClassifier, decide_on_report
from herdbook.reactors.decide_runner import DecideRunner
from tests.fakes import FakeClock, FakeNats, FakeProjector, FakeStore

POLICY = Policy.load(None)


def unhealthy(report_id: str = "r") -> HealthReport:
    return HealthReport(report_id=report_id, node_id="n1", boot_id="b", checks=(
        CheckResult(name="gpu", status="unhealthy", message="GPU 3 is gone"),))


def fatal(report_id: str = "r") -> HealthReport:
    return HealthReport(report_id=report_id, node_id="n1", boot_id="b",
                        events=(GpuEvent(kind="xid", xid=79),))


def healthy(report_id: str = "r") -> HealthReport:
    return HealthReport(report_id=report_id, node_id="n1", boot_id="b")


class World:
    def __init__(self, threshold: int = 2, decided: dict[str, int] | None = None,
                 projector: FakeProjector | None = None, store: FakeStore | None = None) -> None:
        self.projector = projector or FakeProjector()
        self.store = store or FakeStore(self.projector)
        self.clock = FakeClock()
        self.classifier = HealthClassifier(FakeNats(), self.projector,  # type: ignore[arg-type]
                                           POLICY, threshold, clock=self.clock, runner=DecideRunner(
                                               self.store, self.projector, self.clock))  # type: ignore[arg-type]
        self.classifier.follow(decided or {})

    def ready(self) -> None:
        for event in (NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()),
                      NodeApproved(node_id="n1"),
                      NodeBootChecked(node_id="n1", boot_id="b", passed=True)):
            self.store.fold(event)

    def again(self, decided: dict[str, int]) -> World:
        """Another classifier (a restart, a replica) over the same store and view."""
        return World(self.classifier.threshold, decided, self.projector, self.store)

    def appended(self) -> list[NodeHealthChanged | NodeDown]:
        return [e for e, _ in self.store.appended]


# the decider ----------------------------------------------------------------------


def test_a_report_already_decided_on_decides_nothing() -> None:
    world = World()
    world.ready()
    view = world.projector.nodes["n1"]
    verdict = POLICY.classify(fatal())
    decision, count = decide_on_report(view, verdict, fatal(), 7, 1, 2, decided_through=7)
    assert (decision, count) == (None, 1)
    assert decide_on_report(None, verdict, fatal(), 8, 1, 2, 0) == (None, 1)
    decision, count = decide_on_report(view, verdict, fatal(), 8, 1, 2, decided_through=7)
    assert decision is not None and decision.expected == view.version and count == 2
    classified, down = decision.events
    assert isinstance(classified, NodeHealthChanged) and classified.report_seq == 8
    assert isinstance(down, NodeDown)


# the classifier -------------------------------------------------------------------


async def test_unhealthy_after_the_threshold_carries_its_report() -> None:
    world = World(threshold=2)
    world.ready()
    await world.classifier.classify(unhealthy("r1"), 11)
    assert world.appended() == [] and world.classifier.unhealthy_in_a_row["n1"] == 1
    version = world.projector.nodes["n1"].version
    await world.classifier.classify(unhealthy("r2"), 12)
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeHealthChanged) and event.health is Health.UNHEALTHY
    assert (event.report_id, event.report_seq, expected) == ("r2", 12, version)
    assert event.at == world.clock.now()
    assert world.classifier.decided == {"n1": 12}


async def test_a_fatal_report_downs_the_node_with_its_cause_chain() -> None:
    world = World()
    world.ready()
    await world.classifier.classify(fatal("r-79"), 3)
    classified, down = world.appended()
    assert isinstance(classified, NodeHealthChanged) and classified.fatal
    assert isinstance(down, NodeDown) and down.causation_id == classified.event_id
    assert classified.causation_id == "r-79"
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.DOWN


async def test_reprocessing_after_a_restart_changes_nothing() -> None:
    world = World(threshold=2)
    world.ready()
    for seq in (11, 12):
        await world.classifier.classify(unhealthy(f"r{seq}"), seq)
    assert len(world.store.appended) == 1
    # when the control plane starts again, resuming from its last health change
    restarted = world.again({"n1": 12})
    assert restarted.classifier._position == 12
    # and the same reports are delivered again (a replica, a replay), then nothing
    for seq in (11, 12):
        await restarted.classifier.classify(unhealthy(f"r{seq}"), seq)
    assert len(world.store.appended) == 1
    assert restarted.classifier.unhealthy_in_a_row == {}


async def test_reports_after_the_last_decision_rebuild_the_count() -> None:
    world = World(threshold=3)
    world.ready()
    await world.classifier.classify(healthy("r1"), 1)
    assert [e.health for e in world.appended()] == [Health.HEALTHY]   # type: ignore[union-attr]
    # two unhealthy reports decided nothing before the restart
    restarted = world.again({"n1": 1})
    for seq in (2, 3):
        await restarted.classifier.classify(unhealthy(), seq)
    assert len(world.store.appended) == 1
    # the third in a row counts as third
    await restarted.classifier.classify(unhealthy(), 4)
    *_, last = world.appended()
    assert isinstance(last, NodeHealthChanged) and last.health is Health.UNHEALTHY
    assert last.report_seq == 4


async def test_another_replica_deciding_the_same_report_first_means_no_duplicate() -> None:
    world = World()
    world.ready()
    # given another replica's decision on report 5 lands between our decision and append
    world.store.race(NodeHealthChanged(node_id="n1", health=Health.UNHEALTHY, fatal=True,
                                       report_id="r-79", report_seq=5, actor="replica-2"))
    await world.classifier.classify(fatal("r-79"), 5)
    # then we decide again from the newer view: the report is decided, nothing more
    assert [e.actor for e in world.appended()] == []
    assert world.classifier.decided == {"n1": 5}
    assert world.projector.nodes["n1"].health is Health.UNHEALTHY


async def test_an_operator_uncordon_starts_the_count_again() -> None:
    world = World(threshold=2)
    world.ready()
    for seq in (1, 2):
        await world.classifier.classify(unhealthy(), seq)
    world.store.fold(NodeUncordoned(node_id="n1", actor="op", reason="fixed"))
    assert world.projector.nodes["n1"].health is Health.UNKNOWN
    await world.classifier.classify(unhealthy(), 3)
    assert [e.event_name for e in world.appended()] == ["health_changed"]
    await world.classifier.classify(unhealthy(), 4)
    assert [e.event_name for e in world.appended()] == ["health_changed"] * 2


async def test_reports_of_unknown_nodes_keep_no_state() -> None:
    world = World()
    await world.classifier.classify(unhealthy(), 1)
    assert world.store.appended == [] and world.classifier.unhealthy_in_a_row == {}
