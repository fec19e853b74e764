"""The control plane's part lifecycle (control/parts.py) with fake parts and a fake lease:
start order, reverse stop, leader-only parts started and stopped with the lease."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from nats.js.errors import NotFoundError

from herdbook.control.errors import StartupError
from herdbook.control.parts import Parts, PerTerm, Service, Subscribed


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []


class FakePart:
    def __init__(self, log: Log, name: str, *, leader_only: bool = False,
                 fail_start: bool = False, fail_stop: bool = False) -> None:
        self.log = log
        self.name = name
        self.leader_only = leader_only
        self.fail_start = fail_start
        self.fail_stop = fail_stop

    async def start(self) -> None:
        self.log.lines.append(f"start {self.name}")
        if self.fail_start:
            raise RuntimeError(f"{self.name} cannot start")

    async def stop(self) -> None:
        self.log.lines.append(f"stop {self.name}")
        if self.fail_stop:
            raise RuntimeError(f"{self.name} cannot stop")


class FakeLease:
    """What the real lease does with its callbacks: calls them when won and lost."""

    def __init__(self) -> None:
        self.on_elected: Callable[[], Awaitable[None]] | None = None
        self.on_lost: Callable[[], Awaitable[None]] | None = None
        self.leader = False

    async def win(self) -> None:
        self.leader = True
        assert self.on_elected is not None
        await self.on_elected()

    async def lose(self) -> None:
        self.leader = False
        assert self.on_lost is not None
        await self.on_lost()


class LeasePart(FakePart):
    """The lease as a part: wins on start (a lone replica), hands over on stop."""

    def __init__(self, log: Log, lease: FakeLease) -> None:
        super().__init__(log, "lease")
        self.lease = lease

    async def start(self) -> None:
        await super().start()
        await self.lease.win()

    async def stop(self) -> None:
        await super().stop()
        if self.lease.leader:
            await self.lease.lose()


def plane(log: Log, lease: FakeLease | None = None, **fail: str) -> Parts:
    parts = [FakePart(log, "nats"), FakePart(log, "projector"), FakePart(log, "sweeper")]
    if lease is not None:
        parts.append(LeasePart(log, lease))
    parts += [FakePart(log, "scheduler", leader_only=True),
              FakePart(log, "notifier", leader_only=True), FakePart(log, "api")]
    for part in parts:
        part.fail_start = part.name == fail.get("start")
        part.fail_stop = part.name == fail.get("stop")
    return Parts(parts, lease)


async def test_given_no_lease_parts_start_in_order_and_stop_in_reverse() -> None:
    log = Log()
    parts = plane(log)
    await parts.start()
    assert log.lines == ["start nats", "start projector", "start sweeper", "start api"]
    log.lines.clear()
    await parts.stop()
    assert log.lines == ["stop api", "stop sweeper", "stop projector", "stop nats"]
    assert parts.started == []


async def test_given_the_lease_when_won_at_start_then_leader_parts_start_after_it() -> None:
    log, lease = Log(), FakeLease()
    parts = plane(log, lease)
    await parts.start()
    assert log.lines == ["start nats", "start projector", "start sweeper", "start lease",
                         "start scheduler", "start notifier", "start api"]
    log.lines.clear()
    await parts.stop()
    # the leader's parts stop with the lease, in reverse, before what came before it
    assert log.lines == ["stop api", "stop lease", "stop notifier", "stop scheduler",
                         "stop sweeper", "stop projector", "stop nats"]


async def test_when_the_lease_is_lost_and_won_again_then_leader_parts_stop_and_start() -> None:
    log, lease = Log(), FakeLease()
    parts = plane(log, lease)
    await parts.start()
    log.lines.clear()
    await lease.lose()
    assert log.lines == ["stop notifier", "stop scheduler"]
    log.lines.clear()
    await lease.win()
    assert log.lines == ["start scheduler", "start notifier"]
    log.lines.clear()
    await parts.stop()
    assert log.lines == ["stop api", "stop lease", "stop notifier", "stop scheduler",
                         "stop sweeper", "stop projector", "stop nats"]


async def test_when_stopped_while_not_leading_then_leader_parts_are_not_stopped_again() -> None:
    log, lease = Log(), FakeLease()
    parts = plane(log, lease)
    await parts.start()
    await lease.lose()
    log.lines.clear()
    await parts.stop()
    assert log.lines == ["stop api", "stop lease", "stop sweeper", "stop projector",
                         "stop nats"]


async def test_when_a_part_fails_to_start_then_what_started_stops_in_reverse() -> None:
    log = Log()
    parts = plane(log, start="sweeper")
    with pytest.raises(RuntimeError, match="sweeper cannot start"):
        await parts.start()
    # a part whose start was begun is stopped too: every stop tolerates a half start
    assert log.lines == ["start nats", "start projector", "start sweeper",
                         "stop sweeper", "stop projector", "stop nats"]
    log.lines.clear()
    await parts.stop()
    assert log.lines == []


async def test_a_start_that_timed_out_is_one_line_naming_the_part() -> None:
    """``asyncio.wait_for`` raises a TimeoutError with no message: `herd up` said a bare
    "Error:" after waiting 60 s for a feed on a stream deleted from outside."""
    async def wait_for_ever() -> None:
        await asyncio.wait_for(asyncio.Event().wait(), 0.01)

    parts = Parts([Service("circuit breaker", wait_for_ever)])
    with pytest.raises(StartupError) as raised:
        await parts.start()
    assert str(raised.value) == ("circuit breaker did not start: it timed out; is NATS "
                                 "answering? (herd status)")


async def test_a_start_nats_refused_is_one_line_naming_the_part() -> None:
    async def stream_gone() -> None:
        raise NotFoundError(code=404, err_code=10059, description="stream not found")

    parts = Parts([Service("projector", stream_gone)])
    with pytest.raises(StartupError) as raised:
        await parts.start()
    assert str(raised.value) == "projector did not start: NATS answered: stream not found"


async def test_when_a_part_fails_to_stop_then_the_rest_stop_all_the_same(
        caplog: pytest.LogCaptureFixture) -> None:
    log = Log()
    parts = plane(log, stop="projector")
    await parts.start()
    log.lines.clear()
    await parts.stop()
    assert log.lines == ["stop api", "stop sweeper", "stop projector", "stop nats"]
    assert "stopping projector failed" in caplog.text


async def test_when_stopping_then_a_lease_won_meanwhile_starts_nothing() -> None:
    log, lease = Log(), FakeLease()
    parts = plane(log, lease)
    await parts.start()
    await lease.lose()
    await parts.stop()
    log.lines.clear()
    await lease.win()
    assert log.lines == []


class Reactor:
    built = 0

    def __init__(self, log: Log) -> None:
        Reactor.built += 1
        self.log = log
        self.term = Reactor.built

    def start(self) -> None:    # some reactors start synchronously
        self.log.lines.append(f"start term {self.term}")

    async def stop(self) -> None:
        self.log.lines.append(f"stop term {self.term}")


async def test_a_per_term_part_is_built_afresh_for_every_term() -> None:
    log, lease = Log(), FakeLease()
    Reactor.built = 0
    reactor = PerTerm("reactor", lambda: Reactor(log))
    parts = Parts([LeasePart(log, lease), reactor], lease)
    await parts.start()
    first = reactor.current
    await lease.lose()
    assert reactor.current is None
    await lease.win()
    assert reactor.current is not None and reactor.current is not first
    await parts.stop()
    assert log.lines == ["start lease", "start term 1", "stop term 1", "start term 2",
                         "stop lease", "stop term 2"]


async def test_a_service_and_a_subscription_are_parts() -> None:
    log = Log()
    listening: list[str] = []

    def subscribe() -> Callable[[], None]:
        listening.append("on")
        return lambda: listening.append("off")

    parts = Parts([Service("sync", lambda: log.lines.append("start sync")),
                   Subscribed("counting", subscribe),
                   Service("nothing to start", stop=lambda: log.lines.append("stop it"))])
    await parts.start()
    await parts.stop()
    assert log.lines == ["start sync", "stop it"]
    assert listening == ["on", "off"]
