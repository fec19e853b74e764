"""The control plane as a list of parts of one shape, started in order and stopped in
reverse (``bootstrap`` builds the list).

A part has a ``name``, a ``leader_only`` flag, and ``start``/``stop``. ``Parts.start``
starts every part that is not leader-only, in order; the leader-only ones run while the
leader lease is held (``control/leader.py``): winning it starts them in order, losing it
stops them in reverse, winning it again starts them again. ``Parts.stop`` stops every
started part in reverse order; the leader-only ones stop with the lease (they sit right
after it in the list).

A part whose start was begun is stopped, even if that start failed or was cancelled:
every ``stop`` here tolerates a half-done ``start``. A start that fails stops what was
started before it and raises.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import nats.errors

from herdbook.control.errors import StartupError

log = logging.getLogger(__name__)


class Part(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def leader_only(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Lease(Protocol):
    """What ``Parts`` needs of the leader lease: to be told when it is won and lost."""

    on_elected: Callable[[], Awaitable[None]] | None
    on_lost: Callable[[], Awaitable[None]] | None


Step = Callable[[], Awaitable[None] | None]
"""A start or a stop: some of the reactors start synchronously."""


async def _run(step: Step) -> None:
    result = step()
    if inspect.isawaitable(result):
        await result


async def _nothing() -> None:
    return None


class Service:
    """A part made of two steps (an object's own ``start`` and ``stop``, mostly)."""

    def __init__(self, name: str, start: Step = _nothing, stop: Step = _nothing, *,
                 leader_only: bool = False) -> None:
        self.name = name
        self.leader_only = leader_only
        self._start = start
        self._stop = stop

    async def start(self) -> None:
        await _run(self._start)

    async def stop(self) -> None:
        await _run(self._stop)


class Subscribed:
    """A part that is a subscription (a listener on a view table): subscribed on start,
    unsubscribed on stop."""

    def __init__(self, name: str, subscribe: Callable[[], Callable[[], None]], *,
                 leader_only: bool = False) -> None:
        self.name = name
        self.leader_only = leader_only
        self.subscribe = subscribe
        self._unsubscribe: Callable[[], None] | None = None

    async def start(self) -> None:
        self._unsubscribe = self.subscribe()

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None


class Startable(Protocol):
    def start(self) -> Awaitable[None] | None: ...

    def stop(self) -> Awaitable[None] | None: ...


T = TypeVar("T", bound=Startable)


class PerTerm(Generic[T]):
    """A leader-only part built afresh for every term of the lease: a reactor keeps no
    state (timers, workers, queues) from a term it lost into the next one."""

    leader_only = True

    def __init__(self, name: str, build: Callable[[], T]) -> None:
        self.name = name
        self.build = build
        self.current: T | None = None
        """The reactor of the term in progress; None while not leading."""

    async def start(self) -> None:
        self.current = self.build()
        await _run(self.current.start)

    async def stop(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            await _run(current.stop)


class Parts:
    def __init__(self, parts: Sequence[Part], lease: Lease | None = None) -> None:
        """``lease``: leader-only parts run while it is held (it calls ``lead`` when won,
        ``follow`` when lost). Without one they never run."""
        self.parts = tuple(parts)
        self.started: list[Part] = []
        """In the order they were started."""
        self._stopping = False
        if lease is not None:
            lease.on_elected = self.lead
            lease.on_lost = self.follow

    async def start(self) -> None:
        """Start every part but the leader-only ones, in order. One that fails: what
        started stops (in reverse) and the error is raised."""
        self._stopping = False
        try:
            for part in self.parts:
                if not part.leader_only:
                    await self._start(part)
        except BaseException:
            await self.stop()
            raise

    async def lead(self) -> None:
        """The lease is won: start the leader-only parts in order."""
        for part in self.parts:
            if self._stopping:
                return
            if part.leader_only and part not in self.started:
                await self._start(part)

    async def follow(self) -> None:
        """The lease is lost (or handed back when stopping): stop the leader-only parts
        in reverse order."""
        for part in reversed(list(self.started)):
            if part.leader_only:
                await self._stop(part)

    async def stop(self) -> None:
        """Stop every started part in reverse order; a part that fails to stop is logged
        and the rest stop all the same."""
        self._stopping = True
        for part in reversed(list(self.started)):
            if not part.leader_only:
                await self._stop(part)
        await self.follow()    # without a lease, or one that did not hand over

    async def _start(self, part: Part) -> None:
        log.debug("starting %s", part.name)
        self.started.append(part)
        try:
            await part.start()
        except TimeoutError as err:
            # A bounded wait that ran out (``asyncio.wait_for``: no message, which `herd
            # up` printed as a bare "Error:"): one line naming what did not start.
            raise StartupError(f"{part.name} did not start: it timed out"
                               + (f" ({err})" if str(err) else "")
                               + "; is NATS answering? (herd status)") from err
        except nats.errors.Error as err:
            # What NATS answered (a stream deleted from outside in the middle of the
            # start: "stream not found"): one line, not a traceback.
            said = getattr(err, "description", None) or str(err) or type(err).__name__
            raise StartupError(f"{part.name} did not start: NATS answered: {said}") from err

    async def _stop(self, part: Part) -> None:
        if part not in self.started:
            return      # the lease was lost while stopping: stopped once only
        self.started.remove(part)
        log.debug("stopping %s", part.name)
        try:
            await part.stop()
        except Exception:
            log.exception("stopping %s failed", part.name)
