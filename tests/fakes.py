"""Hand-written fakes shared by the unit tests (cosmicpython's ``FakeUnitOfWork``): a
clock, a NATS that records publishes, a projector over a real ``ReadModel``, and an
in-memory event log that checks expected versions as JetStream does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from herdbook.events.base import Event
from herdbook.events.codec import AnyEvent
from herdbook.events.store import ConflictError, EventStore
from herdbook.projector.catch_up_gc import CatchUpGc
from herdbook.projector.tables import ReadModel


class FakeClock:
    """The one clock (``herdbook.clock.Clock``), moved by hand. Its state is one number,
    ``seconds`` (the monotonic time); the wall time is ``epoch`` plus it, so both move
    together whether a test sets ``seconds`` or calls ``advance``."""

    def __init__(self, epoch: datetime | None = None, seconds: float = 0.0) -> None:
        self.epoch = epoch or datetime(2026, 1, 1, tzinfo=UTC)
        self.seconds = seconds

    def now(self) -> datetime:
        return self.epoch + timedelta(seconds=self.seconds)

    def monotonic(self) -> float:
        return self.seconds

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class FakeNats:
    """Records core publishes (dead letters, pokes)."""

    def __init__(self) -> None:
        self.published: list[tuple[str, bytes, dict[str, str]]] = []

    async def publish(self, subject: str, data: bytes = b"",
                      headers: dict[str, str] | None = None) -> None:
        self.published.append((subject, data, headers or {}))


class FakeProjector:
    """The projector's read side without NATS or SQLite: a real ``ReadModel``, folded at
    once by ``FakeStore``; ``wait_applied`` records what it was asked to wait for."""

    def __init__(self) -> None:
        self.model = ReadModel()
        self.nodes = self.model.nodes
        self.allocs = self.model.allocs
        self.alloc_versions = self.model.alloc_versions
        self.evals = self.model.evals
        self.jobs = self.model.jobs
        self.instances = self.model.instances
        self.pool_sizes = self.model.pool_sizes
        self.waited: list[int] = []
        self.gc = CatchUpGc()   # the scheduler plans under the projector's collector

    async def wait_applied(self, seq: int, timeout: float = 10.0) -> None:
        self.waited.append(seq)

    async def catch_up(self, timeout: float = 30.0) -> None:
        return None


def filter_of(event: Event) -> str:
    """The aggregate's subject filter, unchecked: a fake may hold ids no subject can."""
    return f"herd.{type(event).aggregate}.{event.aggregate_id}.>"


class FakeStore:
    """An in-memory event log: checks the expected version against its own last sequence
    per aggregate (as the server does), and folds each event into the projector at once
    (as the real pair has done by the time ``wait_applied`` returns)."""

    def __init__(self, projector: FakeProjector, last_seq: int = 100) -> None:
        self.projector = projector
        self.seq = last_seq
        self.last: dict[str, int] = {}
        self.appended: list[tuple[Any, int | None]] = []
        self.racing: list[AnyEvent] = []

    def race(self, *events: AnyEvent) -> None:
        """Another writer lands first: the next append to each event's aggregate finds
        it stored (and folded), after the decision was made from the view without it."""
        self.racing.extend(events)

    def fold(self, event: AnyEvent) -> int:
        """Store one event (from anyone) and fold it into the projector."""
        self.seq += 1
        self.last[filter_of(event)] = self.seq
        self.projector.model.fold(self.seq, event)
        return self.seq

    # the real sequencing of one decision's events, over this fake's append
    append_decided = EventStore.append_decided

    async def append(self, event: Any, expected_version: int | None = None) -> int:
        filt = filter_of(event)
        for first in [e for e in self.racing if filter_of(e) == filt]:
            self.racing.remove(first)
            self.fold(first)
        current = self.last.get(filt, 0)
        if expected_version is not None and expected_version != current:
            raise ConflictError(filt, expected_version)
        self.appended.append((event, expected_version))
        return self.fold(event)

    atomic = True
    """Takes atomic batches (``append_atomic``), as a stream with ``allow_atomic`` does."""

    async def append_atomic(self, parts: Any) -> int:
        """Several aggregates' decisions, all or none: every part's expected version is
        checked (after the racing writers land) before any event is stored."""
        for events, _ in parts:
            filt = filter_of(events[0])
            for first in [e for e in self.racing if filter_of(e) == filt]:
                self.racing.remove(first)
                self.fold(first)
        for events, expected in parts:
            filt = filter_of(events[0])
            if self.last.get(filt, 0) != expected:
                raise ConflictError(filt, expected)
        for events, expected in parts:
            version = expected
            for event in events:
                self.appended.append((event, version))
                version = self.fold(event)
        return self.seq

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int:
        return self.last.get(f"herd.{aggregate}.{aggregate_id}.>", 0)

    def of(self, node_id: str) -> list[tuple[str, int | None]]:
        return [(e.event_name, v) for e, v in self.appended if e.node_id == node_id]
