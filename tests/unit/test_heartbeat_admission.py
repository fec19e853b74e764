"""Which heartbeats and health reports count (DESIGN §9, "the subject is the authority"):
bound to their subject, known nodes only, announced boots only; and a sweeper that never
retries a failing append in a tight loop. No NATS: hand-written fakes, injected clock."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from herdbook.config import ConfigError, heartbeats_max_age, parse_config
from herdbook.events.codec import AnyEvent, encode
from herdbook.events.health_report import CheckResult, HealthReport
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import (
    NodeBootChecked,
    NodeBootStarted,
    NodeDeleted,
    NodeInfo,
    NodeRegistered,
)
from herdbook.events.states import Lifecycle
from herdbook.events.streams import DAY, heartbeats_stream
from herdbook.events.subjects import event_subject
from herdbook.health.policy import Policy
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.heartbeats import Admission, NodeBeat, judge
from herdbook.reactors.sweeper import Sweeper
from tests.fakes import FakeClock, FakeNats, FakeProjector, FakeStore
from tests.unit.test_sweeper_heap import CONFIG

DEEP = b"[" * 50_000 + b"]" * 50_000


def deep_body(**fields: str) -> bytes:
    """A body msgspec cannot decode without a RecursionError: 50k nested arrays."""
    head = ",".join(f'"{k}":"{v}"' for k, v in fields.items())
    return b"{" + head.encode() + b',"x":' + DEEP + b"}"


class World:
    def __init__(self, store_type: type[FakeStore] = FakeStore) -> None:
        self.clock = FakeClock()
        self.nc = FakeNats()
        self.projector = FakeProjector()
        self.store = store_type(self.projector)
        self.sweeper = Sweeper(self.nc, self.store, self.projector, CONFIG,  # type: ignore[arg-type]
                               clock=self.clock,
                               runner=DecideRunner(self.store, self.projector, self.clock))  # type: ignore[arg-type]
        self.projector.nodes.subscribe(self.sweeper._on_view_change)

    def fold(self, event: AnyEvent) -> None:
        """An event folded by the projector, listeners told (as the real runner does)."""
        self.store.fold(event)

    def register(self, node_id: str, boot_id: str = "boot-a") -> None:
        self.fold(NodeRegistered(node_id=node_id, boot_id=boot_id, info=NodeInfo()))
        self.fold(NodeBootChecked(node_id=node_id, boot_id=boot_id, passed=True))

    def accept(self, node_id: str, seq: int, boot_id: str = "boot-a") -> Admission:
        hb = Heartbeat(node_id=node_id, boot_id=boot_id, seq=seq)
        return self.sweeper.accept(hb, self.clock.seconds)

    async def receive(self, subject: str, data: bytes) -> None:
        msg = SimpleNamespace(subject=subject, data=data)
        await self.sweeper.intake.on_heartbeat(msg, self.clock.seconds)  # type: ignore[arg-type]

    async def tick(self, to: float) -> None:
        self.clock.seconds = to
        self.sweeper.sweep()
        for _ in range(5):
            await asyncio.sleep(0)

    def appended(self, node_id: str) -> list[str]:
        return [name for name, _ in self.store.of(node_id)]

    def per_node_sizes(self) -> dict[str, int]:
        s = self.sweeper
        return {"beats": len(s.beats), "armed": len(s.deadlines.armed), "heap": len(s.deadlines.heap),
                "unannounced": len(s.intake.unannounced), "inflight": len(s.declarations.inflight),
                "booting": len(s._booting_since), "ready": len(s._ready_since),
                "backoff": len(s.declarations.backoff)}


@pytest.fixture
def world() -> World:
    return World()


def sweeper_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("herdbook.reactors")]


# bound to the subject ---------------------------------------------------------------

@pytest.mark.parametrize("bad_id", ["n\x1b[31m1", "n" * 200_000],
                         ids=["ansi-escapes", "200KB"])
async def test_a_heartbeat_whose_subject_id_is_invalid_is_dead_lettered_once(
        world: World, caplog: pytest.LogCaptureFixture, bad_id: str) -> None:
    caplog.set_level(logging.DEBUG)
    # given a heartbeat on herd.hb.<bad id> naming that id in its body
    hb = Heartbeat(node_id=bad_id, boot_id="boot-a", seq=1)
    # when it arrives, and the sweeper runs for 11 minutes
    await world.receive(f"herd.hb.{bad_id}", encode(hb))
    for t in range(0, 660):
        await world.tick(float(t))
    # then it is dead-lettered once, with an escaped, bounded subject header
    [(subject, data, headers)] = world.nc.published
    assert subject == "herd.deadletter.HERD_HEARTBEATS"
    assert data == encode(hb)
    assert "\x1b" not in headers["Herd-Subject"] and len(headers["Herd-Subject"]) < 1100
    assert "invalid node id" in headers["Herd-Error"]
    assert world.sweeper.deadlettered == 1
    # and nothing is kept or retried: one short log line in all
    assert world.per_node_sizes() == dict.fromkeys(world.per_node_sizes(), 0)
    lines = sweeper_lines(caplog)
    assert len(lines) == 1
    assert "\x1b" not in lines[0].getMessage() and len(lines[0].getMessage()) < 500


async def test_a_body_naming_another_node_changes_nothing(world: World) -> None:
    # given n1 and n2, READY, heartbeating
    for node_id in ("n1", "n2"):
        world.register(node_id)
        assert world.accept(node_id, seq=5) is Admission.ACCEPTED
    before = {n: NodeBeat(**vars(world.sweeper.beats[n])) for n in ("n1", "n2")}
    # when a heartbeat naming n2, of a new boot and a huge seq, arrives on herd.hb.n1
    world.clock.seconds = 20.0
    forged = Heartbeat(node_id="n2", boot_id="boot-a", seq=10**15, running_allocs=3)
    await world.receive("herd.hb.n1", encode(forged))
    # then it is dead-lettered and neither node's heartbeat state moved
    assert [s for s, _, _ in world.nc.published] == ["herd.deadletter.HERD_HEARTBEATS"]
    assert "body names node 'n2'" in world.nc.published[0][2]["Herd-Error"]
    assert {n: world.sweeper.beats[n] for n in ("n1", "n2")} == before
    assert world.accept("n2", seq=6) is Admission.ACCEPTED


async def test_a_deeply_nested_heartbeat_is_dead_lettered_and_counted(world: World) -> None:
    world.register("n1")
    await world.receive("herd.hb.n1", deep_body(node_id="n1", boot_id="boot-a"))
    [(subject, _, headers)] = world.nc.published
    assert subject == "herd.deadletter.HERD_HEARTBEATS"
    assert "recursion" in headers["Herd-Error"]
    assert world.sweeper.deadlettered == 1
    assert world.sweeper.beats["n1"].boot_id == ""   # only the registration's placeholder


async def test_a_heartbeat_with_an_invalid_boot_id_is_dead_lettered(world: World) -> None:
    world.register("n1")
    await world.receive("herd.hb.n1", encode(Heartbeat(node_id="n1", boot_id="", seq=1)))
    assert world.sweeper.deadlettered == 1
    assert world.sweeper.accepted == 0


# unknown nodes -----------------------------------------------------------------------

async def test_heartbeats_of_unknown_nodes_keep_no_state(world: World) -> None:
    # given one known node
    world.register("n1")
    world.accept("n1", seq=1)
    sizes = world.per_node_sizes()
    # when 20k made-up nodes heartbeat, each twice
    for seq in (1, 2):
        for i in range(20_000):
            await world.receive(f"herd.hb.u{i}",
                                encode(Heartbeat(node_id=f"u{i}", boot_id="b", seq=seq)))
    await world.tick(5.0)
    # then they are counted and nothing per node grew
    assert world.sweeper.unknown_dropped == 40_000
    assert world.per_node_sizes() == sizes
    assert world.nc.published == []


async def test_a_heartbeat_that_beats_the_registration_does_not_make_the_node_look_dead(
        world: World) -> None:
    # given a heartbeat of n1 observed before its registration is folded
    assert world.accept("n1", seq=1) is Admission.UNKNOWN_NODE
    # when the registration and boot check are folded at t=1
    world.clock.seconds = 1.0
    world.register("n1")
    # then its clock starts there: nothing before 31s, and heartbeats every 10s keep it up
    for seq, t in enumerate((10.0, 20.0, 30.0, 40.0), start=2):
        await world.tick(t)
        assert world.accept("n1", seq=seq) is Admission.ACCEPTED
    await world.tick(69.9)
    assert world.appended("n1") == []
    await world.tick(70.0)
    assert world.appended("n1") == ["degraded"]


async def test_a_deleted_node_leaves_nothing_behind(world: World) -> None:
    world.register("n1")
    world.accept("n1", seq=1)
    world.accept("n1", seq=2, boot_id="boot-b")   # unannounced: kept for a while
    world.fold(NodeDeleted(node_id="n1"))
    assert world.per_node_sizes()["beats"] == 0
    assert world.per_node_sizes()["unannounced"] == 0
    assert world.accept("n1", seq=3) is Admission.UNKNOWN_NODE


# announced boots ---------------------------------------------------------------------

@pytest.mark.parametrize(("beat", "announced", "boot_id", "seq", "verdict"), [
    (None, "a", "a", 1, Admission.ACCEPTED),                       # first of the view's boot
    (None, "a", "evil", 1, Admission.UNANNOUNCED_BOOT),
    (NodeBeat(0.0, "a", 5), "a", "a", 6, Admission.ACCEPTED),
    (NodeBeat(0.0, "a", 5), "a", "a", 5, Admission.REPLAY),
    (NodeBeat(0.0, "a", 5), "a", "evil", 10**18, Admission.UNANNOUNCED_BOOT),
    (NodeBeat(0.0, "a", 5), "b", "b", 1, Admission.ACCEPTED),       # announced restart
    (NodeBeat(0.0, "a", 5), "b", "a", 6, Admission.ACCEPTED),       # old boot still in flight
    (NodeBeat(0.0, "b", 1, ["a"]), "b", "a", 99, Admission.REPLAY),  # a previous boot
    (NodeBeat(0.0, "", 0), "a", "a", 1, Admission.ACCEPTED),        # registered, never beat
])
def test_judge(beat: NodeBeat | None, announced: str, boot_id: str, seq: int,
               verdict: Admission) -> None:
    assert judge(beat, announced, boot_id, seq) is verdict


async def test_a_forged_boot_does_not_silence_the_node(world: World) -> None:
    # given n1 READY, heartbeating every 10s from boot-a
    world.register("n1")
    assert world.accept("n1", seq=1) is Admission.ACCEPTED
    # when a heartbeat with a made-up boot and a huge seq arrives
    world.clock.seconds = 5.0
    assert world.accept("n1", seq=10**18, boot_id="evil") is Admission.UNANNOUNCED_BOOT
    # then the real ones are still accepted and n1 never degrades
    for seq in range(2, 20):
        await world.tick(seq * 10.0 - 10.0)
        assert world.accept("n1", seq=seq) is Admission.ACCEPTED
    await world.tick(200.0)
    assert world.appended("n1") == []
    beat = world.sweeper.beats["n1"]
    assert (beat.boot_id, beat.seq, beat.recent_boots) == ("boot-a", 19, [])
    assert world.sweeper.unannounced_dropped == 1


async def test_a_restart_heartbeat_ahead_of_its_boot_started_counts_once_announced(
        world: World) -> None:
    # given n1 READY on boot-a
    world.register("n1")
    world.accept("n1", seq=7)
    # when the agent restarts: its first heartbeat of boot-b is observed at t=12, before
    # its boot_started is folded at t=13
    world.clock.seconds = 12.0
    assert world.accept("n1", seq=8, boot_id="boot-b") is Admission.UNANNOUNCED_BOOT
    world.clock.seconds = 13.0
    world.fold(NodeBootStarted(node_id="n1", boot_id="boot-b"))
    # then that heartbeat counts, seen at t=12
    beat = world.sweeper.beats["n1"]
    assert (beat.boot_id, beat.seq, beat.last_seen, beat.recent_boots) == (
        "boot-b", 8, 12.0, ["boot-a"])
    # and the restart goes through BOOTING to READY with no DEGRADED on the way
    world.clock.seconds = 14.0
    world.fold(NodeBootChecked(node_id="n1", boot_id="boot-b", passed=True))
    for seq, t in enumerate((22.0, 32.0, 42.0), start=9):
        await world.tick(t)
        assert world.accept("n1", seq=seq, boot_id="boot-b") is Admission.ACCEPTED
    await world.tick(71.9)
    assert world.appended("n1") == []
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.READY
    # and boot-a's heartbeats are replays from now on
    assert world.accept("n1", seq=100) is Admission.REPLAY


async def test_after_an_operator_reboot_the_boot_check_announces_the_new_boot(
        world: World) -> None:
    # given n1 DOWN on boot-a, rebooted by an operator (the event names no boot)
    world.register("n1")
    world.accept("n1", seq=1)
    await world.tick(30.0)
    await world.tick(90.0)
    world.fold(NodeBootStarted(node_id="n1", trigger="reboot", actor="operator"))
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.BOOTING
    # when the agent's first heartbeat of its new boot comes before its boot check
    world.clock.seconds = 100.0
    assert world.accept("n1", seq=2, boot_id="boot-b") is Admission.UNANNOUNCED_BOOT
    world.clock.seconds = 101.0
    world.fold(NodeBootChecked(node_id="n1", boot_id="boot-b", passed=True))
    # then it counts, and the node stays READY while it heartbeats
    assert world.sweeper.beats["n1"].boot_id == "boot-b"
    for seq, t in enumerate((110.0, 120.0, 130.0), start=3):
        await world.tick(t)
        assert world.accept("n1", seq=seq, boot_id="boot-b") is Admission.ACCEPTED
    await world.tick(159.0)
    assert world.appended("n1") == ["degraded", "down"]
    assert world.projector.nodes["n1"].lifecycle is Lifecycle.READY


def test_only_the_latest_unannounced_heartbeat_is_kept_and_only_its_boot_promotes(
        world: World) -> None:
    world.register("n1")
    world.accept("n1", seq=1)
    world.accept("n1", seq=2, boot_id="boot-b")
    world.accept("n1", seq=10**18, boot_id="evil")   # a forger replaces it
    assert len(world.sweeper.intake.unannounced) == 1
    world.fold(NodeBootStarted(node_id="n1", boot_id="boot-b"))
    assert world.sweeper.beats["n1"].boot_id == "boot-a"   # evil was not promoted
    assert world.accept("n1", seq=3, boot_id="boot-b") is Admission.ACCEPTED


# failing appends ---------------------------------------------------------------------

class BrokenStore(FakeStore):
    """Every append fails the way a node id no subject can hold did (issue 13): the
    error message carries the whole id."""

    def __init__(self, projector: FakeProjector) -> None:
        super().__init__(projector)
        self.attempts = 0
        self.broken = True

    async def append(self, event: Any, expected_version: int | None = None) -> int:
        if self.broken:
            self.attempts += 1
            event_subject("node", event.node_id, event.event_name)   # raises for a bad id
            raise RuntimeError("nats: timeout")
        return await super().append(event, expected_version)


@pytest.mark.parametrize("node_id", ["n1", "n\x1b[31m1" + "x" * 200_000],
                         ids=["good-id", "bad-id"])
async def test_a_failing_append_backs_off_and_is_logged_once(
        caplog: pytest.LogCaptureFixture, node_id: str) -> None:
    caplog.set_level(logging.DEBUG, logger="herdbook.reactors")
    world = World(BrokenStore)
    store = world.store
    assert isinstance(store, BrokenStore)
    # given a READY node that stops heartbeating, and a store that refuses every append
    world.register(node_id)
    world.accept(node_id, seq=1)
    # when the sweeper runs every 200ms for 11 minutes
    for step in range(int(660 / 0.2)):
        await world.tick(step * 0.2)
    # then it tried at 30s, 31, 33, 37, ... then once a minute, not every 200ms
    assert 10 <= store.attempts <= 20
    # and logged one line, of bounded size
    errors = [r for r in sweeper_lines(caplog) if r.levelno >= logging.WARNING]
    assert len(errors) == 1
    assert len(errors[0].getMessage()) < 1000 and errors[0].exc_info is None
    if node_id == "n1":
        # when the store works again, the decisions land from the next retry on (silent
        # for 10 minutes: DEGRADED, then DOWN at once)
        store.broken = False
        for step in range(3300, 3300 + 400):
            await world.tick(step * 0.2)
        assert world.appended(node_id) == ["degraded", "down"]
        assert world.sweeper.declarations.backoff == {}


# health reports ----------------------------------------------------------------------

class Classifier:
    def __init__(self, tmp_path: Path) -> None:
        self.nc = FakeNats()
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        clock = FakeClock()
        self.classifier = HealthClassifier(
            self.nc, self.projector, Policy.load(None),  # type: ignore[arg-type]
            threshold=1, clock=clock,
            runner=DecideRunner(self.store, self.projector, clock))  # type: ignore[arg-type]
        self.seq = 0

    async def receive(self, subject: str, data: bytes) -> None:
        self.seq += 1
        msg = SimpleNamespace(subject=subject, data=data,
                              reply=f"$JS.ACK.HERD_HEALTH.c.1.{self.seq}.{self.seq}.0.0")
        await self.classifier._on_report(msg)  # type: ignore[arg-type]


def unhealthy(node_id: str) -> bytes:
    return encode(HealthReport(report_id="r1", node_id=node_id, boot_id="boot-a", checks=(
        CheckResult(name="gpu", status="unhealthy", message="GPU 3 is gone"),)))


@pytest.mark.parametrize(("subject", "body", "reason"), [
    ("herd.health.n1", deep_body(node_id="n1", report_id="r1", boot_id="b"), "recursion"),
    ("herd.health.n1", unhealthy("n2"), "body names node 'n2'"),
    ("herd.health.n\x1b[31m2", unhealthy("n\x1b[31m2"), "invalid node id"),
], ids=["deeply-nested", "another-node", "ansi-escapes"])
async def test_a_health_report_its_subject_does_not_vouch_for_is_dead_lettered(
        tmp_path: Path, subject: str, body: bytes, reason: str) -> None:
    c = Classifier(tmp_path)
    for node_id in ("n1", "n2"):
        c.store.fold(NodeRegistered(node_id=node_id, boot_id="boot-a"))
    await c.receive(subject, body)
    [(dead_subject, _, headers)] = c.nc.published
    assert dead_subject == "herd.deadletter.HERD_HEALTH"
    assert reason in headers["Herd-Error"] and "\x1b" not in headers["Herd-Subject"]
    assert c.classifier.deadlettered == 1 and c.classifier._position == 1
    assert c.store.appended == []
    # and a report on its own subject still counts
    await c.receive("herd.health.n2", unhealthy("n2"))
    assert [e.event_name for e, _ in c.store.appended] == ["health_changed"]


# retention of HERD_HEARTBEATS --------------------------------------------------------

def test_heartbeats_expire_after_a_day_by_default() -> None:
    assert heartbeats_max_age(parse_config(b"")) == DAY
    assert heartbeats_stream().max_age == DAY
    assert heartbeats_stream(max_age_s=3.0).duplicate_window == 3.0


def test_a_long_timeout_lengthens_the_default_retention() -> None:
    config = parse_config(b"lifecycle: {heartbeat_timeout: 1d}")
    assert heartbeats_max_age(config) == 2 * (DAY + 60.0)


def test_a_retention_shorter_than_the_longest_silence_is_refused() -> None:
    assert heartbeats_max_age(parse_config(b"lifecycle: {heartbeats_max_age: 2h}")) == 7200.0
    with pytest.raises(ConfigError, match="heartbeats_max_age: must be at least 420s"):
        parse_config(b"lifecycle: {heartbeats_max_age: 5m}")
