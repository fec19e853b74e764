"""The repair fold (``history/repairs.py``) kept live on the control plane, for
``/metrics``, ``herd status`` and ``fleet.repairs``, so that none of them reads the log per
request.

Seeded from the log, then fed by the projector: on start it listens to the projector's
node and instance tables (events folded from then on are held back) and notes how far
the projector had folded; a background task reads HERD_EVENTS' node and instance events
up to that sequence (``read_repairs``), then folds what was held back and goes live. So
every episode the log holds is counted, once, whatever restarted; until the read is done
``ready`` is False (its cost: one read of the node events, as ``herd audit verify``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from nats.js import JetStreamContext

from herdbook.backoff import Backoff
from herdbook.events.instance import InstanceProvisioning
from herdbook.history.reader import NODE_EVENTS, LogEntry, scan_log
from herdbook.history.repair_episodes import RepairsState
from herdbook.history.repairs import apply

log = logging.getLogger(__name__)
INSTANCE_EVENTS = "herd.instance.>"
SEED_RETRY = Backoff(2.0, factor=1.0, step=2.0, cap=30.0)
"""Reading the log for repairs failed: again after 2 s, 4, 6 ... 30 s."""


class Listened(Protocol):
    """A projector table (``projector.tables.Table``): who hears of its changes."""

    def subscribe(self, listener: Callable[[str, Any, Any], None]) -> Callable[[], None]: ...


async def read_repairs(js: JetStreamContext, state: RepairsState,
                       last: int | None = None) -> RepairsState:
    """Fold the log's node events and the instance events that name a replacement, in
    stream order, up to ``last`` (default: the end now), into ``state``."""
    successors: list[tuple[int, InstanceProvisioning]] = []

    def on_instance(entry: LogEntry) -> None:
        if isinstance(entry.event, InstanceProvisioning) and entry.event.replaces:
            successors.append((entry.seq, entry.event))

    await scan_log(js, INSTANCE_EVENTS, on_instance, last=last)
    successors.reverse()

    def on_node(entry: LogEntry) -> None:
        while successors and successors[-1][0] < entry.seq:
            apply(state, successors[-1][1], successors.pop()[0])
        if entry.event is not None:
            apply(state, entry.event, entry.seq)

    await scan_log(js, NODE_EVENTS, on_node, last=last)
    while successors:
        apply(state, successors[-1][1], successors.pop()[0])
    return state


class LiveRepairs:
    """``state``: every episode of the log, from the moment ``ready`` is True."""

    def __init__(self, js: JetStreamContext, nodes: Listened, instances: Listened,
                 folded: Callable[[], int], gated: frozenset[str] = frozenset()) -> None:
        """``gated``: the validation triggers configured (``RepairsState.gated``)."""
        self.js = js
        self.gated = gated
        self.nodes = nodes
        self.instances = instances
        self.folded = folded
        self.state = RepairsState(gated=gated)
        self.ready = False
        self.failed: str | None = None
        self._held: list[tuple[int, Any]] | None = []
        self._unsubscribe: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None

    def _on_change(self, key: str, row: Any, event: Any) -> None:
        # A node's row carries the sequence of its last event; a deleted one none (0:
        # folded whatever the position, as it comes after everything before it).
        seq = int(getattr(row, "version", 0) or 0)
        if self._held is not None:
            self._held.append((seq, event))
        else:
            apply(self.state, event, seq)

    async def start(self) -> None:
        self.state, self.ready, self._held = RepairsState(gated=self.gated), False, []
        self._unsubscribe = [self.nodes.subscribe(self._on_change),
                             self.instances.subscribe(self._on_change)]
        upto = self.folded()     # no await since subscribing: nothing folded in between
        self._task = asyncio.create_task(self._seed(upto), name="repairs seed")

    async def _seed(self, upto: int) -> None:
        attempt = 0
        while True:
            try:
                state = await read_repairs(self.js, RepairsState(gated=self.gated),
                                           last=upto)
                break
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - NATS away: read it all again later
                attempt += 1
                self.failed = f"reading the log for repairs failed: {err}"
                log.warning("%s (attempt %d); trying again", self.failed, attempt)
                await asyncio.sleep(SEED_RETRY.nth(attempt - 1))
        for seq, event in self._held or ():
            apply(state, event, seq)
        self.state, self._held, self.ready, self.failed = state, None, True, None
        log.info("repairs: %d episodes from the log up to sequence %d (%d open)",
                 len(state.closed) + len(state.open), upto, len(state.open))

    async def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
