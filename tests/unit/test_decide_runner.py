"""The one decide → append → retry runner, over the in-memory store: given past events,
when a decision runs (with someone else writing in between), then these events."""

from __future__ import annotations

import pytest

from herdbook.events.node import NodeApproved, NodeCordoned, NodeInfo, NodeRegistered
from herdbook.events.pool import PoolScaled
from herdbook.events.states import Approval
from herdbook.reactors.decide_runner import Context, Decision, KeptChanging
from tests import world as shared
from tests.world import T0


class World(shared.World):
    def __init__(self) -> None:
        super().__init__(attempts=3)
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
    assert (event.event_id, event.at) == ("id0001", T0)
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
    assert b.causation_id == a.event_id == "id0001"
    assert c.causation_id == "stored-1"


# several aggregates at once, and facts no version decides ---------------------------------


def both_nodes(world: World, reason: str) -> list[Decision[NodeCordoned]]:
    """One decision per node, each from its node's current version."""
    return [Decision(world.projector.nodes[n].version,
                     [NodeCordoned(node_id=n, actor="op", reason=reason)]) for n in ("n1", "n2")]


async def test_an_atomic_decision_stamps_every_part_and_stores_them_as_one_batch() -> None:
    world = World()
    world.store.fold(NodeRegistered(node_id="n2", boot_id="b", info=NodeInfo()))
    versions = [world.projector.nodes[n].version for n in ("n1", "n2")]
    done = await world.runner.run_atomic("both", lambda _: both_nodes(world, "x"))
    assert [(e.node_id, e.event_id, e.at) for e in done.events] == [
        ("n1", "id0001", T0), ("n2", "id0002", T0)]
    assert [v for _, v in world.store.appended] == versions
    assert world.projector.waited == [done.seq] and done.seq == world.store.seq


async def test_a_stale_part_stores_no_part_and_all_are_decided_again() -> None:
    world = World()
    world.store.fold(NodeRegistered(node_id="n2", boot_id="b", info=NodeInfo()))
    world.store.race(NodeApproved(node_id="n2", actor="other"))
    decided = 0

    def decide(context: Context) -> list[Decision[NodeCordoned]]:
        nonlocal decided
        decided += 1
        return both_nodes(world, f"try {decided}")

    done = await world.runner.run_atomic("both", decide)
    assert decided == 2
    # the first try stored nothing, n1's part neither; the second both, from the newer n2
    assert [(e.node_id, e.reason) for e, _ in world.store.appended] == [
        ("n1", "try 2"), ("n2", "try 2")]
    assert [e for e, _ in world.store.appended] == list(done.events)


async def test_one_attempt_makes_a_stale_atomic_decision_kept_changing_at_once() -> None:
    world = World()
    world.store.fold(NodeRegistered(node_id="n2", boot_id="b", info=NodeInfo()))
    world.store.race(NodeApproved(node_id="n2", actor="other"))
    with pytest.raises(KeptChanging, match="plan X is stale"):
        await world.runner.run_atomic("plan X", lambda _: both_nodes(world, "x"), attempts=1)
    assert world.store.appended == [] and world.projector.waited == []


async def test_a_blind_fact_is_stamped_and_appended_expecting_no_version() -> None:
    world = World()
    done = await world.runner.append_blind([PoolScaled(pool="p", size=3, actor="op")])
    [event] = done.events
    assert (event.event_id, event.at) == ("id0001", T0)
    assert world.store.appended == [(event, None)]
    assert world.projector.waited == [done.seq]


class OtherModel:
    """A read model the projector's view is not: the breaker's fold, for instance."""

    def __init__(self) -> None:
        self.waited: list[int] = []

    async def wait_applied(self, seq: int, timeout: float = 5.0) -> None:
        self.waited.append(seq)


async def test_waiting_on_another_model_is_the_same_runner_reading_elsewhere() -> None:
    world, other = World(), OtherModel()
    twin = world.runner.waiting_on(other)
    assert (twin.store, twin.clock, twin.ids, twin.attempts) == (
        world.runner.store, world.runner.clock, world.runner.ids, world.runner.attempts)
    done = await twin.run("node", "n1", world.approve)
    assert other.waited == [done.seq] and world.projector.waited == []
    assert world.runner.reads is world.projector     # the one it came from is unchanged
