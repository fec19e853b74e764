"""The one decide → append(expected version) → retry loop (pyeventsourcing's
``ProcessApplication``): every writer in the control plane, API commands included,
hands this runner a decision and never handles a conflict itself.

- A decision is ``decide(context) -> Decision``: the events, and the version (stream
  sequence of the aggregate's last event, 0 for none) they were decided from. The
  function reads the current view each time it is called and is otherwise pure: the
  time and the ids come in the context.
- The runner stamps every event with the context's time and a fresh id from its id
  source (a causation inside the decision follows its event's new id), appends them in
  order expecting that version, and waits until the view has folded them.
- A conflict (someone appended to the aggregate first) catches the view up to the
  aggregate's last sequence and decides again, up to ``attempts`` times; then
  ``KeptChanging``. Any other error is the caller's.
- ``run_atomic``: several aggregates' decisions (a scheduling plan's nodes) as one
  atomic batch, all stored or none; ``append_blind``: facts that no version decides
  (a pool's desired size: the last one wins), stamped like any decision.

There is one runner per control plane (``control/bootstrap.py`` builds it) and it is a
required argument of every writer: nothing else in ``herdbook/`` calls the store's
appends (tests/unit/test_one_runner.py checks both).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar, runtime_checkable

from msgspec.structs import replace

from herdbook.clock import Clock
from herdbook.events.base import Event, new_id
from herdbook.events.store import ConflictError

log = logging.getLogger(__name__)

ATTEMPTS = 10
"""Decisions tried on one aggregate before giving up: each conflict means another writer
moved it, and ten in a row means it is changing faster than we can decide."""

E = TypeVar("E", bound=Event)


@dataclass(frozen=True)
class Context:
    """What a decider may take from the world besides the view: the time and ids."""

    now: datetime
    new_id: Callable[[], str]


@dataclass(frozen=True)
class Decision(Generic[E]):
    expected: int
    """The version the events were decided from (0: the aggregate has no events)."""
    events: Sequence[E] = ()


@dataclass(frozen=True)
class Appended(Generic[E]):
    events: tuple[E, ...]
    """As stored: stamped with the decision's time and ids. Empty if nothing was decided."""
    seq: int
    """The stream sequence of the last event (the decided-from version if none)."""


class KeptChanging(Exception):
    """The aggregate changed under every attempt to decide on it."""


class Appends(Protocol):
    async def append(self, event: Event, expected_version: int | None = None) -> int: ...

    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int: ...

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int: ...


@runtime_checkable
class AppendsAtomically(Protocol):
    atomic: bool
    """Whether the stream takes atomic batches (``EventStore``: until it says it does not)."""

    async def append_atomic(self, parts: Sequence[tuple[Sequence[Event], int]]) -> int: ...


class Reads(Protocol):
    async def wait_applied(self, seq: int, timeout: float = ...) -> None: ...


class DecideRunner:
    def __init__(self, store: Appends, reads: Reads, clock: Clock, *,
                 ids: Callable[[], str] = new_id, attempts: int = ATTEMPTS) -> None:
        self.store = store
        self.reads = reads
        self.clock = clock
        self.ids = ids
        self.attempts = attempts

    def context(self) -> Context:
        return Context(now=self.clock.now(), new_id=self.ids)

    def waiting_on(self, reads: Reads) -> DecideRunner:
        """This runner (its store, clock, ids and attempts) catching up on another read
        model after a conflict: the breaker's fold of ``herd.breaker.>``, which the
        projector's view does not fold. One runner, not a second one of its own."""
        twin = copy.copy(self)
        twin.reads = reads
        return twin

    @property
    def atomic(self) -> bool:
        """Whether ``run_atomic`` can append here (the store takes atomic batches)."""
        return isinstance(self.store, AppendsAtomically) and self.store.atomic

    async def run(self, aggregate: str, aggregate_id: str,
                  decide: Callable[[Context], Decision[E] | None], *,
                  wait: bool = True, attempts: int | None = None) -> Appended[E]:
        """Decide on ``aggregate``/``aggregate_id`` and append what was decided; after a
        conflict catch up and decide again. ``wait``: return only once the view holds
        the new events (what a reader right after expects). ``attempts``: this call's
        own limit (1: a conflict is ``KeptChanging`` at once, as a stale plan is)."""
        for _ in range(attempts or self.attempts):
            context = self.context()
            decision = decide(context)
            if decision is None or not decision.events:
                return Appended((), decision.expected if decision is not None else 0)
            events = self.stamp(decision.events, context)
            try:
                seq = await self.store.append_decided(events, decision.expected)
            except ConflictError:
                log.debug("%s %s changed meanwhile; deciding again", aggregate, aggregate_id)
                await self.catch_up(aggregate, aggregate_id)
                continue
            if wait:
                await self.reads.wait_applied(seq)
            return Appended(events, seq)
        raise KeptChanging(f"{aggregate} {aggregate_id} kept changing; try again")

    async def run_atomic(self, what: str,
                         decide: Callable[[Context], Sequence[Decision[E]]], *,
                         wait: bool = True, attempts: int | None = None) -> Appended[E]:
        """Several decisions, each on one aggregate (its events and the version they were
        decided from), appended as one atomic batch: all stored or none. A stale part
        refuses the whole batch; the view catches up with every aggregate decided on and
        all are decided again, up to ``attempts`` times (then ``KeptChanging``, naming
        ``what``). Only where ``atomic`` holds (``EventStore`` itself appends part by
        part once a stream refuses atomic batches)."""
        store = self.store
        if not isinstance(store, AppendsAtomically):
            raise TypeError(f"{type(store).__name__} has no atomic batches")
        tries = attempts or self.attempts
        for attempt in range(tries):
            context = self.context()
            parts = [(self.stamp(d.events, context), d.expected)
                     for d in decide(context) if d.events]
            if not parts:
                return Appended((), 0)
            try:
                seq = await store.append_atomic(parts)
            except ConflictError as err:
                log.debug("%s: %s; deciding again", what, err)
                if attempt + 1 == tries:
                    # no decision follows: the caller's next one catches up itself
                    raise KeptChanging(f"{what} is stale: {err}") from err
                for aggregate, aggregate_id in {(type(e).aggregate, e.aggregate_id)
                                                for events, _ in parts for e in events[:1]}:
                    await self.catch_up(aggregate, aggregate_id)
                continue
            if wait:
                await self.reads.wait_applied(seq)
            return Appended(tuple(e for events, _ in parts for e in events), seq)
        raise AssertionError("unreachable")

    async def append_blind(self, events: Sequence[E], *, wait: bool = True) -> Appended[E]:
        """Facts no version decides (a pool's desired size: the last one wins), stamped
        like every decision and appended in order expecting nothing: no conflict, no
        retry. ``wait`` as in ``run``."""
        stamped = self.stamp(events, self.context())
        seq = 0
        for event in stamped:
            seq = await self.store.append(event)
        if wait and seq:
            await self.reads.wait_applied(seq)
        return Appended(stamped, seq)

    async def catch_up(self, aggregate: str, aggregate_id: str) -> None:
        """Wait until the view holds the aggregate's last stored event."""
        await self.reads.wait_applied(await self.store.last_sequence(aggregate, aggregate_id))

    def stamp(self, events: Sequence[E], context: Context) -> tuple[E, ...]:
        """Each event gets the context's time and its own new id; a causation or
        correlation naming an event of this decision follows it to the new id."""
        renamed: dict[str, str] = {}
        out: list[E] = []
        for event in events:
            fresh = context.new_id()
            renamed[event.event_id] = fresh
            out.append(replace(
                event, event_id=fresh, at=context.now,
                causation_id=renamed.get(event.causation_id or "", event.causation_id),
                correlation_id=renamed.get(event.correlation_id or "",
                                           event.correlation_id)))
        return tuple(out)
