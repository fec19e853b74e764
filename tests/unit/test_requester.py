"""The control plane's own node (control/requester.py): each start announces a new boot
and its boot check through the decide runner, decided from the node's version."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from herdbook.agent.protocol import MemorySequence, NodeProtocol
from herdbook.control.requester import RequesterNode, decide_boot
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.states import NodeType
from herdbook.reactors.decide_runner import DecideRunner
from tests.fakes import FakeClock, FakeProjector, FakeStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INFO = NodeInfo(hostname="cp", cpus=4)


class Nats:
    def __init__(self) -> None:
        self.published: list[str] = []

    async def publish(self, subject: str, data: bytes = b"") -> None:
        self.published.append(subject)

    async def flush(self) -> None:
        return None


def requester(store: FakeStore, projector: FakeProjector, nc: Nats) -> RequesterNode:
    node = NodeProtocol("cp-1", actor="control:cp-1", seqs=MemorySequence())
    runner = DecideRunner(store, projector, FakeClock(NOW))
    return RequesterNode(nc, runner, projector.nodes, node, INFO,  # type: ignore[arg-type] - a fake client
                         interval=60.0)


def test_a_new_node_is_registered_as_a_requester_and_boot_checked_from_version_0() -> None:
    node = NodeProtocol("cp-1", actor="control:cp-1", seqs=MemorySequence())
    decision = decide_boot(None, node, INFO)
    assert decision.expected == 0
    registered, checked = decision.events
    assert isinstance(registered, NodeRegistered) and isinstance(checked, NodeBootChecked)
    assert registered.node_type is NodeType.REQUESTER and registered.info == INFO
    assert registered.boot_id == checked.boot_id == node.boot_id and checked.passed


async def test_given_a_registered_node_when_it_starts_then_a_new_boot_follows_its_version(
) -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    nc = Nats()
    first = requester(store, projector, nc)
    await first.start()
    await asyncio.sleep(0)      # its heartbeat loop sends the first one
    await first.stop()
    version = projector.nodes["cp-1"].version

    again = requester(store, projector, nc)
    await again.start()
    await again.stop()
    # both events of each start, the second start's expecting the first's last event
    assert store.of("cp-1") == [("registered", 0), ("boot_checked", version - 1),
                                ("registered", version), ("boot_checked", version + 1)]
    boots = {e.boot_id for e, _ in store.appended}
    assert len(boots) == 2
    assert all(e.at == NOW for e, _ in store.appended)
    assert nc.published and nc.published[0].endswith("cp-1")


async def test_when_another_writer_gets_in_first_then_it_decides_again() -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    store.race(NodeRegistered(node_id="cp-1", boot_id="old", node_type=NodeType.REQUESTER))
    node = requester(store, projector, Nats())
    await node.start()
    await node.stop()
    # the first attempt (expecting 0) conflicted; the second expects the raced event
    raced = store.last["herd.node.cp-1.>"] - 2
    assert store.of("cp-1") == [("registered", raced), ("boot_checked", raced + 1)]
    assert projector.nodes["cp-1"].boot_id == node.node.boot_id


def test_a_heartbeat_carries_the_announced_boot() -> None:
    node = NodeProtocol("cp-1", actor="control:cp-1", seqs=MemorySequence())
    boot = node.new_boot()
    beat = node.heartbeat()
    assert isinstance(beat, Heartbeat) and beat.boot_id == boot
