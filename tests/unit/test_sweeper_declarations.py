"""The sweeper's declarations through the decide runner, and its timers: given a node's
past events, when a deadline passes (with another writer landing first), then these
appended events."""

from __future__ import annotations

from herdbook.events.node import (
    NodeCordoned,
    NodeDegraded,
)
from herdbook.events.states import Lifecycle
from herdbook.reactors import liveness
from herdbook.reactors.deadlines import Deadlines
from tests.unit.test_sweeper_heap import CONFIG
from tests.world import SweeperWorld


class World(SweeperWorld):
    def __init__(self) -> None:
        super().__init__(CONFIG)


async def test_a_silent_node_is_declared_degraded_stamped_with_the_clock() -> None:
    world = World()
    world.ready()
    version = world.projector.nodes["n1"].version
    await world.at(29.9)
    assert world.names() == []
    await world.at(30.0)
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeDegraded) and expected == version
    assert event.at == world.clock.now()
    assert world.sweeper.detections == 1


async def test_another_replica_declaring_first_is_decided_again_to_nothing() -> None:
    world = World()
    world.ready()
    # given another replica's DEGRADED lands between our decision and our append
    world.store.race(NodeDegraded(node_id="n1", heartbeat_age=30.0, actor="replica-2"))
    await world.at(30.0)
    # then decided again from the newer view (DEGRADED, grace not over): nothing
    assert world.names() == []
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.DEGRADED
    assert world.sweeper.declarations.backoff == {} and world.sweeper.detections == 0
    # and DOWN once the grace period is over, once
    for t in (60.0, 89.9, 90.0, 95.0, 200.0):
        await world.at(t)
    assert world.names() == ["down"]


async def test_an_unrelated_event_first_still_declares_from_the_newer_version() -> None:
    world = World()
    world.ready()
    world.store.race(NodeCordoned(node_id="n1", actor="op", reason="x"))
    await world.at(30.0)
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeDegraded) and expected == world.store.seq - 1


def test_a_decision_is_of_the_view_it_was_decided_from() -> None:
    world = World()
    world.ready()
    view = world.projector.nodes["n1"]
    timeouts = liveness.Timeouts(30.0, 60.0)
    silent = liveness.Observation(heartbeat_age=31.0, boot_id="b")
    decision = liveness.declaration(view, silent, timeouts)
    assert decision is not None and decision.expected == view.version
    assert [e.event_name for e in decision.events] == ["degraded"]
    assert liveness.declaration(None, silent, timeouts) is None


def test_deadlines_pop_in_order_and_an_earlier_one_supersedes() -> None:
    deadlines = Deadlines()
    deadlines.push(10.0, "a")
    deadlines.push(5.0, "b")
    deadlines.push(20.0, "a")          # later than armed: ignored
    deadlines.push(3.0, "a")           # earlier: supersedes 10.0
    assert "a" in deadlines and len(deadlines) == 3
    assert list(deadlines.due(4.0)) == ["a"]
    assert list(deadlines.due(12.0)) == ["b"]   # a's stale 10.0 entry is skipped
    assert "a" not in deadlines and len(deadlines) == 0
    deadlines.push(1.0, "c")
    deadlines.forget("c")
    assert list(deadlines.due(100.0)) == []
