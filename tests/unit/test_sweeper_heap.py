"""The sweeper without NATS: hand-written fakes for the projector and the store, an
injected clock, and ``observe`` / ``sweep`` called directly."""

from __future__ import annotations

import random

import pytest

from herdbook.config import parse_config
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import (
    NodeBootChecked,
    NodeDegraded,
    NodeDown,
    NodeRecovered,
)
from herdbook.events.states import Lifecycle, NodeClass
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.heartbeats import Admission
from tests.world import SweeperWorld

CONFIG = parse_config(b"lifecycle: {heartbeat_timeout: 30s}")  # grace standard 60s


class World(SweeperWorld):
    def __init__(self) -> None:
        super().__init__(CONFIG, follow_the_view=False)

    def register(self, node_id: str, node_class: NodeClass = NodeClass.STANDARD) -> NodeView:
        self.ready(node_id, "boot-a", node_class=node_class)
        return self.projector.nodes[node_id]

    def heartbeat(self, node_id: str, seq: int, boot_id: str = "boot-a") -> bool:
        hb = Heartbeat(node_id=node_id, boot_id=boot_id, seq=seq)
        return self.sweeper.accept(hb, self.clock.seconds) is Admission.ACCEPTED

    async def tick(self, to: float) -> None:
        """Move the clock, sweep, and let the append tasks run."""
        await self.at(to)


@pytest.fixture
def world() -> World:
    return World()


async def test_nothing_before_the_deadline_then_degraded_once(world: World) -> None:
    # given a READY node at version 101 whose last heartbeat was at t=0
    view = world.register("n1")
    assert world.heartbeat("n1", seq=1)
    # when the clock reaches 29.9s, then nothing
    await world.tick(29.9)
    assert world.store.appended == []
    # when it passes 30s, then one NodeDegraded at the view's version
    await world.tick(30.5)
    assert world.store.of("n1") == [("degraded", view.version)]
    [(event, _)] = world.store.appended
    assert isinstance(event, NodeDegraded)
    assert event.heartbeat_age == pytest.approx(30.5)
    assert world.projector.waited == [world.store.seq]
    # and sweeping on through the grace period adds nothing
    for t in (30.5, 31.0, 45.0, 89.9):
        await world.tick(t)
    assert world.store.of("n1") == [("degraded", view.version)]
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.DEGRADED


async def test_degraded_node_goes_down_when_grace_expires(world: World) -> None:
    world.register("n1")
    world.heartbeat("n1", seq=1)
    await world.tick(30.0)
    degraded_version = world.projector.nodes["n1"].version
    await world.tick(89.9)
    assert [name for name, _ in world.store.of("n1")] == ["degraded"]
    await world.tick(90.0)
    assert world.store.of("n1") == [("degraded", 102), ("down", degraded_version)]
    assert isinstance(world.store.appended[-1][0], NodeDown)
    # and a DOWN node is never swept again
    await world.tick(10_000.0)
    assert len(world.store.appended) == 2


async def test_degraded_node_that_heartbeats_recovers(world: World) -> None:
    world.register("n1")
    world.heartbeat("n1", seq=1)
    await world.tick(31.0)
    degraded_version = world.projector.nodes["n1"].version
    # when a heartbeat arrives within grace
    world.clock.seconds = 50.0
    assert world.heartbeat("n1", seq=2)
    await world.tick(50.0)
    # then NodeRecovered, and the node is READY with a fresh 30s deadline
    assert world.store.of("n1")[-1] == ("recovered", degraded_version)
    assert isinstance(world.store.appended[-1][0], NodeRecovered)
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.READY
    await world.tick(79.9)
    assert len(world.store.appended) == 2
    await world.tick(80.0)
    assert world.store.of("n1")[-1][0] == "degraded"


async def test_down_node_that_heartbeats_stays_down(world: World) -> None:
    world.register("n1")
    world.heartbeat("n1", seq=1)
    await world.tick(30.0)
    await world.tick(90.0)
    world.clock.seconds = 100.0
    assert world.heartbeat("n1", seq=2)
    await world.tick(100.0)
    await world.tick(500.0)
    assert [name for name, _ in world.store.of("n1")] == ["degraded", "down"]


async def test_heartbeats_push_the_deadline(world: World) -> None:
    world.register("n1")
    for seq, t in enumerate([0.0, 20.0, 40.0, 60.0], start=1):
        world.clock.seconds = t
        world.heartbeat("n1", seq=seq)
        await world.tick(t + 5.0)
    await world.tick(89.9)
    assert world.store.appended == []
    await world.tick(90.0)
    assert world.store.of("n1") == [("degraded", 102)]


async def test_sensitive_nodes_get_the_longer_timeout(world: World) -> None:
    world.register("s1", NodeClass.SENSITIVE)
    world.heartbeat("s1", seq=1)
    await world.tick(30.0)
    await world.tick(119.9)
    assert world.store.appended == []
    await world.tick(120.0)
    assert [name for name, _ in world.store.of("s1")] == ["degraded"]


async def test_a_registered_node_that_never_heartbeats_is_timed_from_arming(
        world: World) -> None:
    world.clock.seconds = 5.0
    world.register("n1")
    world.sweeper._arm("n1")
    await world.tick(34.9)
    assert world.store.appended == []
    await world.tick(35.0)
    assert [name for name, _ in world.store.of("n1")] == ["degraded"]
    assert world.sweeper.heartbeat_age("n1") is None  # never heartbeated


async def test_another_writer_first_means_no_duplicate(world: World) -> None:
    # given a READY node at version 101, silent since t=0
    view = world.register("n1")
    world.heartbeat("n1", seq=1)
    # and another control-plane replica that degrades it first, after we decided
    world.store.fold(NodeDegraded(node_id="n1", heartbeat_age=30.0, actor="replica-2"))
    world.projector.nodes.put("n1", view)  # our projector has not folded it yet
    await world.tick(31.0)
    # then our append is refused and nothing is recorded
    assert world.store.appended == []
    # when our projector catches up, the sweeper decides again and adds nothing
    world.projector.nodes.put("n1", apply(view, NodeDegraded(node_id="n1", heartbeat_age=30.0),
                                        world.store.seq))  # type: ignore[arg-type]
    for t in (31.0, 40.0, 60.0):
        await world.tick(t)
    assert world.store.appended == []
    await world.tick(90.0)
    assert world.store.of("n1") == [("down", world.store.seq - 1)]


# replays --------------------------------------------------------------------------


def test_a_replayed_heartbeat_is_dropped_and_counted(world: World) -> None:
    world.register("n1")
    assert world.heartbeat("n1", seq=5)
    assert not world.heartbeat("n1", seq=5)
    assert not world.heartbeat("n1", seq=3)
    assert world.sweeper.replays_dropped == 2
    assert world.heartbeat("n1", seq=6)
    assert world.sweeper.beats["n1"].seq == 6


def test_a_replay_does_not_refresh_last_seen(world: World) -> None:
    world.register("n1")
    world.heartbeat("n1", seq=5)
    world.clock.seconds = 25.0
    world.heartbeat("n1", seq=4)
    assert world.sweeper.beats["n1"].last_seen == 0.0
    assert world.sweeper.heartbeat_age("n1") == 25.0


def test_a_new_boot_is_recorded(world: World) -> None:
    from herdbook.events.node import NodeBootStarted

    world.register("n1")
    world.heartbeat("n1", seq=50, boot_id="boot-a")
    # the agent restarts with a wiped state dir and announces its boot first
    world.store.fold(NodeBootStarted(node_id="n1", boot_id="boot-b"))
    assert world.heartbeat("n1", seq=1, boot_id="boot-b")
    beat = world.sweeper.beats["n1"]
    assert (beat.boot_id, beat.seq, beat.recent_boots) == ("boot-b", 1, ["boot-a"])
    assert not world.heartbeat("n1", seq=1, boot_id="boot-b")


# the heap -------------------------------------------------------------------------

NODES = [f"gpu-{i:03d}" for i in range(10)]


async def test_the_heap_does_not_grow_per_heartbeat(world: World) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    # given 10 READY nodes
    for node_id in NODES:
        world.register(node_id)
    seqs = dict.fromkeys(NODES, 0)
    largest = 0
    # when 1000 heartbeats arrive, 10 per second round-robin in a shuffled order,
    # and the sweeper runs after each
    for rnd in range(100):
        order = NODES[:]
        rng.shuffle(order)
        for i, node_id in enumerate(order):
            world.clock.seconds = rnd * 10.0 + i + rng.random() * 0.5
            seqs[node_id] += 1
            assert world.heartbeat(node_id, seqs[node_id])
            await world.tick(world.clock.seconds)
            largest = max(largest, len(world.sweeper.deadlines.heap))
    # then the heap holds about one entry per node, and no node was degraded
    print(f"largest heap={largest}")
    assert largest <= len(NODES) + 2, f"heap grew to {largest} (seed={seed})"
    assert world.store.appended == []
    assert world.sweeper.replays_dropped == 0


def test_heartbeats_alone_never_push(world: World) -> None:
    for node_id in NODES:
        world.register(node_id)
    for seq in range(1, 101):
        world.clock.seconds = float(seq)
        for node_id in NODES:
            world.heartbeat(node_id, seq)
    assert len(world.sweeper.deadlines.heap) == len(NODES)


async def test_silent_nodes_are_all_detected_once(world: World) -> None:
    for node_id in NODES:
        world.register(node_id)
        world.heartbeat(node_id, 1)
    for t in range(0, 200):
        await world.tick(float(t))
    for node_id in NODES:
        assert [name for name, _ in world.store.of(node_id)] == ["degraded", "down"]
    assert world.sweeper.detections == 2 * len(NODES)
    assert len(world.sweeper.deadlines.heap) <= len(NODES) + 2


async def test_a_reattaching_agent_does_not_count_as_running_nothing(world: World) -> None:
    from types import SimpleNamespace

    from herdbook.events.codec import encode
    from herdbook.events.heartbeat import Heartbeat

    world.register("n1")

    async def beat(seq: int, reattaching: bool) -> None:
        hb = Heartbeat(node_id="n1", boot_id="boot-a", seq=seq, running_allocs=0,
                       reattaching=reattaching)
        msg = SimpleNamespace(data=encode(hb), subject="herd.hb.n1")
        await world.sweeper.intake.on_heartbeat(msg, world.clock.seconds)  # type: ignore[arg-type]

    await beat(1, reattaching=True)
    assert world.sweeper.beats["n1"].running_allocs is None   # unknown, not zero
    assert world.sweeper.beats["n1"].reattaching
    await beat(2, reattaching=False)
    assert world.sweeper.beats["n1"].running_allocs == 0


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
async def test_an_agent_clock_an_hour_off_changes_nothing_in_liveness(world: World,
                                                                      skew: float) -> None:
    import time as _time
    from types import SimpleNamespace

    from herdbook.events.codec import encode
    from herdbook.events.heartbeat import Heartbeat

    world.register("n1")
    for seq in range(1, 30):   # a heartbeat every 10s for ~5 minutes, sent_at an hour off
        hb = Heartbeat(node_id="n1", boot_id="boot-a", seq=seq, sent_at=_time.time() + skew)
        msg = SimpleNamespace(data=encode(hb), subject="herd.hb.n1")
        await world.sweeper.intake.on_heartbeat(msg, world.clock.seconds)  # type: ignore[arg-type]
        await world.tick(world.clock.seconds + 10.0)
    assert world.store.of("n1") == []           # never DEGRADED
    await world.tick(world.clock.seconds + 30.0)    # then silence: detected on our clock
    assert [name for name, _ in world.store.of("n1")] == ["degraded"]


async def test_a_node_that_boots_again_gets_a_full_timeout_from_ready(world: World) -> None:
    from herdbook.events.node import NodeBootStarted

    world.register("n1")
    world.heartbeat("n1", seq=1)
    await world.tick(30.5)
    await world.tick(91.0)
    assert [name for name, _ in world.store.of("n1")] == ["degraded", "down"]
    # long after, the agent starts again: BOOTING, then its boot check passes at t=500,
    # before the first heartbeat of the new boot has arrived
    world.clock.seconds = 499.0
    for event in (NodeBootStarted(node_id="n1", boot_id="boot-b"),
                  NodeBootChecked(node_id="n1", boot_id="boot-b", passed=True)):
        world.store.fold(event)
        world.clock.seconds += 0.5
        world.sweeper._on_view_change("n1", world.projector.nodes["n1"], event)
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.READY
    await world.tick(501.0)
    await world.tick(529.0)
    assert [name for name, _ in world.store.of("n1")] == ["degraded", "down"]   # no flap
    await world.tick(531.0)   # and silence after READY is still detected
    assert [name for name, _ in world.store.of("n1")] == ["degraded", "down", "degraded"]


@pytest.mark.timeout(10)
async def test_a_deadline_that_rounds_below_the_age_does_not_spin_the_sweep(
        world: World) -> None:
    # given a node last seen at t=90.2: its DOWN deadline (90.2 + 30) + 60 is 180.2, but
    # at t=180.2 its age 180.2 - 90.2 is 89.99999999999999, just under timeout + grace
    world.register("n1")
    world.clock.seconds = 90.2
    world.heartbeat("n1", seq=1)
    await world.tick(120.5)
    assert [name for name, _ in world.store.of("n1")] == ["degraded"]
    # when the sweep runs at exactly that deadline, then it returns (nothing is due yet)
    await world.tick(180.2)
    assert [name for name, _ in world.store.of("n1")] == ["degraded"]
    # and the next sweep declares the node DOWN
    await world.tick(180.4)
    assert [name for name, _ in world.store.of("n1")] == ["degraded", "down"]
