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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from msgspec.structs import replace

from herdbook.clock import SYSTEM_CLOCK, Clock
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
    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int: ...

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int: ...


class Reads(Protocol):
    async def wait_applied(self, seq: int, timeout: float = ...) -> None: ...


class DecideRunner:
    def __init__(self, store: Appends, reads: Reads, clock: Clock = SYSTEM_CLOCK, *,
                 ids: Callable[[], str] = new_id, attempts: int = ATTEMPTS) -> None:
        self.store = store
        self.reads = reads
        self.clock = clock
        self.ids = ids
        self.attempts = attempts

    def context(self) -> Context:
        return Context(now=self.clock.now(), new_id=self.ids)

    async def run(self, aggregate: str, aggregate_id: str,
                  decide: Callable[[Context], Decision[E] | None], *,
                  wait: bool = True) -> Appended[E]:
        """Decide on ``aggregate``/``aggregate_id`` and append what was decided; after a
        conflict catch up and decide again. ``wait``: return only once the view holds
        the new events (what a reader right after expects)."""
        for _ in range(self.attempts):
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
