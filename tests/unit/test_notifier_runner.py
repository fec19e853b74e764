"""The notifier's writes through the decide runner: given a node's past events, when a
notification fails for good or the drain-status source says drained, then these events.
The failures that run a real command are in tests/integration/test_notifier.py."""

from __future__ import annotations

from herdbook.config import parse_config
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeDrained,
    NodeDrainStarted,
    NodeInfo,
    NodeNotificationFailed,
    NodeRegistered,
)
from herdbook.events.states import Intent
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.notifier_deciders import decide_drained, decide_failed
from tests.fakes import FakeClock, FakeProjector, FakeStore


class World:
    def __init__(self, yaml: str = "notifier: {type: exec, retries: 0, exec: "
                                   "{drain: 'exit 3', drain_status: 'true'}}") -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock()
        self.notifier = Notifier(parse_config(yaml).notifier, self.projector,  # type: ignore[arg-type]
                                 clock=self.clock, runner=DecideRunner(
                                     self.store, self.projector, self.clock))  # type: ignore[arg-type]
        for event in (NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()),
                      NodeApproved(node_id="n1"),
                      NodeBootChecked(node_id="n1", boot_id="b", passed=True)):
            self.store.fold(event)

    def draining(self) -> None:
        self.store.fold(NodeDrainStarted(node_id="n1", reason="op"))
        assert self.projector.nodes["n1"].intent is Intent.DRAINING


def test_a_failed_notification_is_recorded_on_a_node_that_exists() -> None:
    world = World()
    view = world.projector.nodes["n1"]
    decision = decide_failed(view, "drain", "x" * 900, attempts=3)
    assert decision is not None and decision.expected == view.version
    [event] = decision.events
    assert isinstance(event, NodeNotificationFailed)
    assert (event.action, len(event.reason), event.attempts) == ("drain", 500, 3)
    assert decide_failed(None, "drain", "x", 1) is None


def test_drained_only_while_draining() -> None:
    world = World()
    assert decide_drained(world.projector.nodes["n1"], "") is None
    world.draining()
    view = world.projector.nodes["n1"]
    decision = decide_drained(view, "")
    assert decision is not None and decision.expected == view.version
    [event] = decision.events
    assert isinstance(event, NodeDrained) and "reports it drained" in event.reason
    assert decide_drained(None, "done") is None


async def test_drained_by_the_source_lands_once_even_after_a_race() -> None:
    world = World()
    world.draining()
    # given another replica's failed cordon notification lands first
    world.store.race(NodeNotificationFailed(node_id="n1", action="cordon", reason="x"))
    await world.notifier.mark_drained("n1", "k8s says so")
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeDrained) and event.reason == "k8s says so"
    assert expected == world.store.seq - 1
    # and asked again (the next round), nothing more: the node is DRAINED
    await world.notifier.mark_drained("n1", "k8s says so")
    assert len(world.store.appended) == 1


async def test_an_operator_move_first_means_no_drained() -> None:
    world = World()
    world.draining()
    # given an operator cordons the draining node before our append
    world.store.race(NodeCordoned(node_id="n1", actor="op", reason="x"))
    await world.notifier.mark_drained("n1", "k8s says so")
    # then decided again from the cordoned view: nothing
    assert world.store.appended == []
    assert world.projector.nodes["n1"].intent is Intent.CORDONED
