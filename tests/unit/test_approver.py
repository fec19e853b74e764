"""Auto-approval through the decide runner: given a registered node, when the approver
sees it, then one ``node.approved`` at the version it was decided from."""

from __future__ import annotations

import asyncio

from herdbook.events.node import NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.states import Approval
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.approver import AutoApprover, decide_approval
from herdbook.reactors.decide_runner import DecideRunner
from tests.fakes import FakeClock, FakeProjector, FakeStore


def pending(version: int = 7) -> NodeView:
    view = apply(None, NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()), version)
    assert view is not None and view.approval is Approval.PENDING
    return view


def test_a_pending_node_is_approved_from_its_version() -> None:
    decision = decide_approval(pending(), enabled=True)
    assert decision is not None and decision.expected == 7
    [event] = decision.events
    assert isinstance(event, NodeApproved) and event.actor == "auto-approve"


def test_nothing_is_decided_when_off_approved_or_gone() -> None:
    assert not decide_approval(pending(), enabled=False).events  # type: ignore[union-attr]
    approved = apply(pending(), NodeApproved(node_id="n1"), 9)
    assert not decide_approval(approved, enabled=True).events  # type: ignore[union-attr]
    assert decide_approval(None, enabled=True) is None


class World:
    def __init__(self, enabled: bool = True) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock()
        self.approver = AutoApprover(self.projector, enabled,  # type: ignore[arg-type]
                                     runner=DecideRunner(self.store, self.projector,  # type: ignore[arg-type]
                                                         self.clock))

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


async def test_a_registered_node_is_approved_once() -> None:
    world = World()
    world.approver.start()
    # given a node that registers
    world.store.fold(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
    registered = world.projector.nodes["n1"].version
    await world.settle()
    # then one approval, at the registration's version, stamped with the clock
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeApproved) and expected == registered
    assert event.at == world.clock.now()
    assert world.projector.nodes["n1"].approval is Approval.APPROVED
    # and the approval's own fold decides nothing more
    await world.settle()
    assert len(world.store.appended) == 1
    await world.approver.stop()


async def test_nodes_already_in_the_view_at_start_are_approved() -> None:
    world = World()
    world.store.fold(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
    world.approver.start()
    await world.settle()
    assert [e.event_name for e, _ in world.store.appended] == ["approved"]


async def test_off_approves_nothing() -> None:
    world = World(enabled=False)
    world.store.fold(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
    world.approver.start()
    await world.settle()
    assert world.store.appended == []


async def test_another_writer_first_is_decided_again_from_the_newer_view() -> None:
    world = World()
    world.store.fold(NodeRegistered(node_id="n1", boot_id="b", info=NodeInfo()))
    # given the agent's boot check lands between our decision and our append
    world.store.race(NodeBootChecked(node_id="n1", boot_id="b", passed=True))
    world.approver.start()
    await world.settle()
    # then the approval is decided again and lands once, after the boot check
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeApproved)
    assert expected == world.store.seq - 1 == world.store.last["herd.node.n1.>"] - 1
    assert [e.event_name for e, _ in world.store.appended] == ["approved"]
