"""The one decide → append → retry runner, over the in-memory store: given past events,
when a decision runs (with someone else writing in between), then these events."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

import pytest

from herdbook.events.node import NodeApproved, NodeCordoned, NodeInfo, NodeRegistered
from herdbook.events.states import Approval
from herdbook.reactors.runner import Context, DecideRunner, Decision, KeptChanging
from tests.fakes import FakeClock, FakeProjector, FakeStore

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


class World:
    def __init__(self) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock(T0)
        ids = count(1)
        self.runner = DecideRunner(self.store, self.projector, self.clock,
                                   ids=lambda: f"id{next(ids)}", attempts=3)
        self.store.fold(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))

    def approve(self, context: Context) -> Decision[NodeApproved]:
        """A decider: approve n1 if it is not approved yet, from the current view."""
        view = self.projector.nodes["n1"]
        if view.approval is Approval.APPROVED:
            return Decision(view.version)
        return Decision(view.version, [NodeApproved(node_id="n1", actor="op", reason="ok")])


async def test_a_decision_is_stamped_appended_at_its_version_and_waited_for() -> None:
    world = World()
    version = world.projector.nodes["n1"].version
    done = await world.runner.run("node", "n1", world.approve)
    [event] = done.events
    assert (event.event_id, event.at) == ("id1", T0)
    assert world.store.appended == [(event, version)]
    assert world.projector.waited == [done.seq]
    assert world.projector.nodes["n1"].approval is Approval.APPROVED


async def test_nothing_decided_appends_nothing() -> None:
    world = World()
    await world.runner.run("node", "n1", world.approve)
    again = await world.runner.run("node", "n1", world.approve)
    assert again.events == () and again.seq == world.projector.nodes["n1"].version
    assert len(world.store.appended) == 1


async def test_a_conflict_catches_up_and_decides_again_from_the_newer_view() -> None:
    world = World()
    decided_from: list[int] = []

    def approve_racing(context: Context) -> Decision[NodeApproved]:
        decision = world.approve(context)
        decided_from.append(decision.expected)
        if len(decided_from) == 1:
            # another writer lands between our read and our append
            world.store.fold(NodeCordoned(node_id="n1", actor="other", reason="x"))
        return decision

    done = await world.runner.run("node", "n1", approve_racing)
    assert decided_from[1] > decided_from[0]
    assert [type(e) for e, _ in world.store.appended] == [NodeApproved]
    assert world.store.appended[0][1] == decided_from[1]
    assert world.projector.waited[0] == decided_from[1]   # caught up before deciding again
    assert done.seq == world.store.seq


async def test_an_aggregate_that_never_stops_changing_is_given_up() -> None:
    world = World()

    def always_raced(context: Context) -> Decision[NodeApproved]:
        decision = world.approve(context)
        world.store.fold(NodeCordoned(node_id="n1", actor="other", reason="x"))
        return decision

    with pytest.raises(KeptChanging, match="node n1 kept changing"):
        await world.runner.run("node", "n1", always_raced)
    assert world.store.appended == []


async def test_a_causation_inside_the_decision_follows_the_new_id() -> None:
    world = World()
    first = NodeCordoned(node_id="n1", actor="op", reason="a")
    second = NodeApproved(node_id="n1", actor="op", reason="b", causation_id=first.event_id)
    outside = NodeApproved(node_id="n1", actor="op", reason="c", causation_id="stored-1")
    version = world.projector.nodes["n1"].version
    done = await world.runner.run("node", "n1",
                                  lambda context: Decision(version, [first, second, outside]))
    a, b, c = done.events
    assert b.causation_id == a.event_id == "id1"
    assert c.causation_id == "stored-1"
