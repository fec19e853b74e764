"""A control plane observes for one heartbeat timeout before it declares (DESIGN §9,
issue 14 item 3): after a start, after its own clock jumped (stopped, suspended,
starved) and after its NATS connection came back. No NATS: the fakes of
``test_sweeper_heap``, an injected clock, and the sweeper's loop turned by hand."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import (
    NodeBootStarted,
    NodeDegraded,
    NodeInfo,
    NodeRegistered,
)
from herdbook.events.states import Lifecycle
from herdbook.reactors.heartbeats import Admission
from herdbook.reactors.sweeper import JUMP_FLOOR, Sweeper
from tests.unit.test_sweeper_heap import CONFIG
from tests.world import SweeperWorld

TIMEOUT, GRACE = 30.0, 60.0       # CONFIG: heartbeat_timeout 30s, standard grace 60s
INTERVAL = 0.2                    # lifecycle.sweep_interval
LIVE = ["n1", "n2", "n3"]
SERVER_STOPPED = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class FakeNats:
    def __init__(self) -> None:
        self.is_connected = True


class Fleet(SweeperWorld):
    """A sweeper over a fleet whose agents heartbeat every 10s, and a loop turned by
    hand: ``run`` wakes the sweeper every sweep interval, as its loop does."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__(CONFIG, follow_the_view=False, nc=FakeNats())
        self.clock.seconds = start
        self.seq: dict[str, int] = {}
        self.beating: set[str] = set()
        self.last_beat: dict[str, float] = {}

    def register(self, *node_ids: str) -> None:
        for node_id in node_ids:
            self.ready(node_id, "boot-a")

    def heartbeat(self, node_id: str) -> None:
        self.seq[node_id] = self.seq.get(node_id, 0) + 1
        hb = Heartbeat(node_id=node_id, boot_id="boot-a", seq=self.seq[node_id])
        assert self.sweeper.accept(hb, self.clock.seconds) is Admission.ACCEPTED
        self.last_beat[node_id] = self.clock.seconds

    async def wake(self, asleep_since: float) -> None:
        self.sweeper.wake(asleep_since, INTERVAL)
        for _ in range(5):
            await asyncio.sleep(0)   # the append tasks

    async def run(self, until: float) -> None:
        """The loop sleeping INTERVAL at a time until ``until``; agents in ``beating``
        heartbeat every 10s."""
        while self.clock.seconds + INTERVAL <= until + 1e-9:
            asleep_since = self.clock.seconds
            self.clock.seconds = round(asleep_since + INTERVAL, 6)
            for node_id in sorted(self.beating):
                if self.clock.seconds - self.last_beat.get(node_id, -1e9) >= 10.0:
                    self.heartbeat(node_id)
            await self.wake(asleep_since)

    def events(self, node_id: str | None = None) -> list[str]:
        return [f"{e.node_id}:{e.event_name}" for e, _ in self.store.appended
                if node_id is None or e.node_id == node_id]


async def stored_heartbeat(sweeper: Sweeper, node_id: str, seq: int, at: datetime) -> None:
    """A heartbeat read back from HERD_HEARTBEATS, stored by the server at ``at``."""
    hb = Heartbeat(node_id=node_id, boot_id="boot-a", seq=seq)
    msg = SimpleNamespace(subject=f"herd.hb.{node_id}", data=encode(hb),
                          metadata=SimpleNamespace(timestamp=at))
    await sweeper.intake.on_stored(msg)  # type: ignore[arg-type]


# a start ---------------------------------------------------------------------------


async def restarted_after(outage: float) -> Fleet:
    """Given a fleet of READY nodes whose control plane stopped at SERVER_STOPPED (their
    last stored heartbeats a second before), and a new one starting ``outage`` seconds
    later on the server's clock, at t=1000 on its own monotonic clock."""
    fleet = Fleet(start=1000.0)
    fleet.register(*LIVE, "n4")
    sweeper = fleet.sweeper
    # what start() does: probe the server's clock, read the stored heartbeats, arm
    sweeper.intake.probe_time = SERVER_STOPPED + timedelta(seconds=outage)
    sweeper.intake.probe_clock = fleet.clock.seconds
    for node_id in [*LIVE, "n4"]:
        fleet.seq[node_id] = 41
        await stored_heartbeat(sweeper, node_id, 41, SERVER_STOPPED - timedelta(seconds=1))
    assert sweeper.heartbeat_age("n1") == pytest.approx(outage + 1)   # aged on the server
    sweeper.begin_observing()
    return fleet


@pytest.mark.parametrize("outage", [120.0, 3600.0])
async def test_a_restart_after_a_long_outage_declares_no_node_that_heartbeats_in_time(
        outage: float) -> None:
    # given a control plane started after an outage longer than timeout + grace
    fleet = await restarted_after(outage)
    # when n1..n3 reconnect at different moments of the first heartbeat timeout, the last
    # just before it ends, and heartbeat every 10s from then on
    for node_id, after in (("n1", 0.4), ("n2", 15.0), ("n3", 29.8)):
        await fleet.run(until=1000.0 + after)
        fleet.heartbeat(node_id)
        fleet.beating.add(node_id)
    await fleet.run(until=1300.0)
    # then none of them has a liveness event, and all are READY
    assert [e for e in fleet.events() if not e.startswith("n4:")] == []
    assert all(fleet.projector.nodes[n].lifecycle is Lifecycle.READY for n in LIVE)


async def test_a_restart_declares_a_silent_node_degraded_at_start_plus_timeout() -> None:
    # given a control plane started 120s after the last heartbeats (t=1000)
    fleet = await restarted_after(120.0)
    fleet.beating.update(LIVE)
    # when n4 never heartbeats again, then nothing until start + timeout
    await fleet.run(until=1000.0 + TIMEOUT - INTERVAL)
    assert fleet.events() == []
    # then DEGRADED exactly at start + timeout
    await fleet.run(until=1000.0 + TIMEOUT)
    assert fleet.events() == ["n4:degraded"]
    degraded = fleet.store.appended[-1][0]
    assert isinstance(degraded, NodeDegraded) and degraded.heartbeat_age == TIMEOUT
    # and DOWN when the grace period expires after that, on the normal schedule
    await fleet.run(until=1000.0 + TIMEOUT + GRACE - INTERVAL)
    assert fleet.events() == ["n4:degraded"]
    await fleet.run(until=1000.0 + TIMEOUT + GRACE)
    assert fleet.events() == ["n4:degraded", "n4:down"]


async def test_a_node_degraded_before_the_outage_is_not_recovered_by_its_old_heartbeat(
        ) -> None:
    # given n4 was DEGRADED when the control plane stopped
    fleet = Fleet(start=1000.0)
    fleet.register("n4")
    fleet.store.fold(NodeDegraded(node_id="n4", heartbeat_age=30.0))
    fleet.sweeper.intake.probe_time = SERVER_STOPPED + timedelta(seconds=120)
    fleet.sweeper.intake.probe_clock = 1000.0
    await stored_heartbeat(fleet.sweeper, "n4", 41, SERVER_STOPPED - timedelta(seconds=40))
    # when it starts and n4 stays silent
    fleet.sweeper.begin_observing()
    await fleet.run(until=1000.0 + TIMEOUT + GRACE - INTERVAL)
    # then no RECOVERED from its stored heartbeat, and DOWN one timeout + grace from start
    assert fleet.events() == []
    await fleet.run(until=1000.0 + TIMEOUT + GRACE)
    assert fleet.events() == ["n4:down"]


# a clock jump ----------------------------------------------------------------------


async def paused_fleet(pause: float) -> tuple[Fleet, float]:
    """Given a running fleet (n4 silent since t=95) whose control plane is stopped at
    t=100 for ``pause`` seconds while its agents keep heartbeating (unread); returns it
    woken at the end of the pause, and when that was."""
    fleet = Fleet()
    fleet.register(*LIVE, "n4")
    fleet.sweeper.begin_observing()
    fleet.beating.update([*LIVE, "n4"])
    await fleet.run(until=95.0)
    fleet.beating.discard("n4")
    await fleet.run(until=100.0)
    asleep_since = fleet.clock.seconds
    fleet.clock.seconds = resumed = asleep_since + INTERVAL + pause
    await fleet.wake(asleep_since)
    return fleet, resumed


@pytest.mark.parametrize("pause", [20.0, 120.0, 3600.0])
async def test_a_clock_jump_declares_no_node_whose_heartbeats_were_waiting(
        pause: float) -> None:
    fleet, resumed = await paused_fleet(pause)
    # then the sweeper re-observed before it swept
    assert fleet.sweeper.reobservations == 1
    # when the heartbeats that waited in the socket are read just after
    fleet.clock.seconds = resumed + 0.01
    for node_id in LIVE:
        fleet.heartbeat(node_id)
    await fleet.run(until=resumed + 300.0)
    # then no liveness event for n1..n3
    assert [e for e in fleet.events() if not e.startswith("n4:")] == []


async def test_a_clock_jump_declares_a_silent_node_one_timeout_after_the_jump() -> None:
    fleet, resumed = await paused_fleet(120.0)
    fleet.beating.update(LIVE)
    # n4 was silent for 25s + the pause, yet nothing is declared before jump + timeout
    await fleet.run(until=resumed + TIMEOUT - INTERVAL - 1e-6)
    assert fleet.events() == []
    await fleet.run(until=resumed + TIMEOUT + INTERVAL)
    assert fleet.events() == ["n4:degraded"]
    await fleet.run(until=resumed + TIMEOUT + GRACE - INTERVAL - 1e-6)
    assert fleet.events() == ["n4:degraded"]
    await fleet.run(until=resumed + TIMEOUT + GRACE + INTERVAL)
    assert fleet.events() == ["n4:degraded", "n4:down"]


async def test_a_late_wake_below_the_threshold_is_not_a_jump() -> None:
    # given n4 silent since t=0 and a loop that wakes 10s late at t=25 (threshold 15s)
    fleet = Fleet()
    fleet.register("n4")
    fleet.heartbeat("n4")
    fleet.sweeper.begin_observing()
    assert fleet.sweeper.jump_threshold() == max(JUMP_FLOOR, TIMEOUT / 2)
    await fleet.run(until=25.0)
    fleet.clock.seconds = 25.0 + INTERVAL + 10.0
    await fleet.wake(25.0)
    # then no re-observation: n4 is DEGRADED at once, its timeout having passed
    assert fleet.sweeper.reobservations == 0
    assert fleet.events() == ["n4:degraded"]


async def test_a_boot_timeout_that_ran_out_during_a_pause_waits_one_timeout() -> None:
    # given n5 BOOTING since t=0 (boot timeout 600s), the control plane paused 100..700
    fleet = Fleet()
    fleet.register(*LIVE)
    fleet.store.fold(NodeRegistered(node_id="n5", boot_id="boot-b", info=NodeInfo()))
    fleet.store.fold(NodeBootStarted(node_id="n5", boot_id="boot-b"))
    fleet.sweeper.begin_observing()
    fleet.beating.update(LIVE)
    await fleet.run(until=100.0)
    fleet.clock.seconds = 700.0
    await fleet.wake(100.0 - INTERVAL)
    # then FAILED is not declared before one heartbeat timeout after the pause
    await fleet.run(until=700.0 + TIMEOUT - 2 * INTERVAL)
    assert fleet.events() == []
    await fleet.run(until=700.0 + TIMEOUT + INTERVAL)
    assert fleet.events() == ["n5:failed"]


# a lost connection -----------------------------------------------------------------


async def test_nothing_is_declared_while_disconnected_and_one_timeout_after() -> None:
    # given a fleet whose control plane loses NATS at t=100 for 120s (n4 silent since 95)
    fleet = Fleet()
    fleet.register(*LIVE, "n4")
    fleet.sweeper.begin_observing()
    fleet.beating.update([*LIVE, "n4"])
    await fleet.run(until=95.0)
    fleet.beating.discard("n4")
    await fleet.run(until=100.0)
    fleet.nc.is_connected = False
    fleet.beating.clear()
    await fleet.run(until=220.0)
    assert fleet.events() == []
    # when it reconnects and n1..n3's heartbeats arrive within a timeout, n4's never
    fleet.nc.is_connected = True
    await fleet.run(until=220.2)
    assert fleet.sweeper.reobservations == 1
    await fleet.run(until=229.0)
    fleet.beating.update(LIVE)
    await fleet.run(until=220.2 + TIMEOUT - INTERVAL)
    assert fleet.events() == []
    # then only n4 is declared, one timeout after the reconnection
    await fleet.run(until=220.2 + TIMEOUT)
    assert fleet.events() == ["n4:degraded"]
