"""The sensitive reactor through the decide runner: given a node's past events, when a
release, a wipe timeout or a conformance round, then these appended events."""

from __future__ import annotations

from herdbook.config import parse_config
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeClaimed,
    NodeConformanceChanged,
    NodeCordoned,
    NodeDrainStarted,
    NodeInfo,
    NodeRegistered,
    NodeReleased,
    NodeWipeFailed,
    NodeWipeStarted,
)
from herdbook.events.states import Intent, NodeClass
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.sensitive import (
    SensitiveReactor,
    decide_release,
    decide_wipe_timeout,
)
from tests.fakes import FakeClock, FakeProjector, FakeStore

CONFIG = parse_config(b"sensitive: {wipe_timeout: 10m}")


class World:
    def __init__(self) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock()
        self.fingerprints: dict[str, str] = {}
        self.reactor = SensitiveReactor(self.projector, CONFIG,  # type: ignore[arg-type]
                                        lambda: self.fingerprints, clock=self.clock,
                                        runner=DecideRunner(self.store, self.projector,  # type: ignore[arg-type]
                                                            self.clock))

    def sensitive(self, node_id: str, pool: str = "secure") -> NodeView:
        info = NodeInfo(node_class=NodeClass.SENSITIVE, labels={"pool": pool})
        for event in (NodeRegistered(node_id=node_id, boot_id="b", info=info),
                      NodeApproved(node_id=node_id),
                      NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
            self.store.fold(event)
        return self.projector.nodes[node_id]

    def released(self, node_id: str) -> NodeView:
        self.sensitive(node_id)
        self.store.fold(NodeClaimed(node_id=node_id, user="ana"))
        self.store.fold(NodeReleased(node_id=node_id, user="ana"))
        view = self.projector.nodes[node_id]
        assert view.release_pending
        return view


# deciders -------------------------------------------------------------------------


def test_a_release_drains_while_others_run_then_wipes() -> None:
    world = World()
    view = world.released("s1")
    drain = decide_release(view, running=2, wipe_timeout=600.0)
    assert drain is not None and drain.expected == view.version
    [event] = drain.events
    assert isinstance(event, NodeDrainStarted) and "2 other" in event.reason
    wipe = decide_release(view, running=0, wipe_timeout=600.0)
    assert wipe is not None
    [started] = wipe.events
    assert isinstance(started, NodeWipeStarted)
    assert (started.attempt, started.timeout_s) == (1, 600.0)


def test_a_release_decides_nothing_while_draining_wiping_or_not_released() -> None:
    world = World()
    view = world.released("s1")
    world.store.fold(NodeDrainStarted(node_id="s1"))
    assert decide_release(world.projector.nodes["s1"], running=1, wipe_timeout=1.0) is None
    world.store.fold(NodeWipeStarted(node_id="s1", attempt=1))
    assert decide_release(world.projector.nodes["s1"], running=0, wipe_timeout=1.0) is None
    assert decide_release(world.sensitive("s2"), running=0, wipe_timeout=1.0) is None
    assert decide_release(None, running=0, wipe_timeout=1.0) is None
    assert view.intent is Intent.ELIGIBLE


def test_a_wipe_timeout_fails_only_its_own_attempt() -> None:
    world = World()
    world.released("s1")
    world.store.fold(NodeWipeStarted(node_id="s1", attempt=2, timeout_s=60.0))
    view = world.projector.nodes["s1"]
    assert decide_wipe_timeout(view, attempt=1) is None
    failed = decide_wipe_timeout(view, attempt=2)
    assert failed is not None and failed.expected == view.version
    [event] = failed.events
    assert isinstance(event, NodeWipeFailed) and "60s" in event.reason


# the reactor ----------------------------------------------------------------------


async def test_a_released_node_is_wiped_at_its_version() -> None:
    world = World()
    version = world.released("s1").version
    await world.reactor.after_release("s1")
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeWipeStarted) and expected == version
    assert event.timeout_s == 600.0 and event.at == world.clock.now()
    # and deciding again (the DRAINED that follows, a restart) adds nothing
    await world.reactor.after_release("s1")
    assert len(world.store.appended) == 1


async def test_a_wipe_timeout_after_another_writer_is_decided_again() -> None:
    world = World()
    world.released("s1")
    world.store.fold(NodeWipeStarted(node_id="s1", attempt=1))
    # given an operator's cordon lands between our decision and our append
    world.store.race(NodeCordoned(node_id="s1", actor="op", reason="x"))
    await world.reactor.wipe_timed_out("s1", attempt=1)
    # then the failure is decided again from the newer view and lands once
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeWipeFailed)
    assert expected == world.store.seq - 1
    assert world.projector.nodes["s1"].wipe_status == "failed"


async def test_conformance_records_each_drifted_node_once() -> None:
    world = World()
    for node_id in ("s1", "s2", "s3"):
        world.sensitive(node_id)
    world.fingerprints.update({"s1": "a", "s2": "a", "s3": "b"})
    decided_from = world.projector.nodes["s3"].version
    # given s3 is cordoned by an operator after the round read its view
    world.store.race(NodeCordoned(node_id="s3", actor="op", reason="x"))
    assert await world.reactor.check_conformance() == 4
    names = {node_id: [e.event_name for e, _ in world.store.appended
                       if e.node_id == node_id] for node_id in ("s1", "s2", "s3")}
    assert names == {"s1": ["conformance_changed"], "s2": ["conformance_changed"],
                     "s3": ["conformance_changed", "drain_started"]}
    drift = [e for e, _ in world.store.appended
             if isinstance(e, NodeConformanceChanged) and e.drift]
    assert [e.node_id for e in drift] == ["s3"]
    # s3 was decided again after the cordon: from its newer version
    [record_expected] = [v for e, v in world.store.appended if e.node_id == "s3"][:1]
    assert record_expected == world.store.last["herd.node.s3.>"] - 2 > decided_from
    # and a second round finds nothing changed
    assert await world.reactor.check_conformance() == 0
