"""The fleet-wide circuit breaker: automatic actions stop when too much of the fleet, or of
one pool, was taken out automatically within a window.

A node counts as *taken out automatically* when the health classifier made it UNHEALTHY
(the only writer of health changes) or an automatic actor (conformance drains) drained it,
within ``breaker.window`` and after the scope's last reset: read from the node view, so
every replica counts the same. A scope is the fleet or one pool (label ``pool``); its size
is its approved compute nodes that are not TERMINATED. Its limit is
``max(min_nodes, floor(max_share * size))``.

An automatic action on a node is held when, in one of the node's scopes, the scope is
open (tripped and not reset) or one more take-out would exceed the limit. The decider
then appends ``node.action_held`` (the kind, what would have happened, the reason) in
place of the action, once per node and kind until the next reset. A tripped scope holds
every automatic action until an operator resets it (``herd breaker reset``): a window
that passes does not close it. After a reset, held actions are not replayed: they are
decided again on the node's next report (health) or the next reconcile or conformance
round, counted from the reset. Operators' own commands never pass through here.

Pure core, thin shell: what is held, and what a trip records, is decided in
``reactors/breaker_deciders.py`` from values (the fold, the view, the decision's time).
This module keeps the fold current, hands reactors the gate at their decision's time,
and trips: a folded ``node.action_held`` in a scope that is not open is decided into
``breaker.tripped`` through the runner at the fold's version (``decide_trip``), so the
first hold trips its scope once, however many replicas fold it or tries decide it.

The breaker's own state (trips and resets) is a fold of ``herd.breaker.>`` that
``BreakerFold`` reads from the start of the stream on every start (a handful of events).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.clock import Clock
from herdbook.config import BreakerConfig
from herdbook.events.authority import bind_event
from herdbook.events.breaker_events import BREAKER_ID, BreakerEvent, BreakerTripped, NodeActionHeld
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.node_view import NodeView
from herdbook.reactors.breaker_deciders import (
    BreakerGate,
    BreakerState,
    ScopeTally,
    decide_reset,
    decide_trip,
    fold,
    since_reset,
    tally,
)
from herdbook.reactors.decide_runner import Appended, Context, DecideRunner, Decision

log = logging.getLogger(__name__)


class BreakerFold:
    """``herd.breaker.fleet.>`` folded from the start, kept current: the breaker's state
    and the ``Reads`` its runner waits on (the projector's view does not fold it)."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.state = BreakerState()
        self._feed: StreamFeed | None = None
        self._applied = asyncio.Condition()

    async def start(self) -> None:
        self._feed = StreamFeed(self.nc, EVENTS_STREAM, f"herd.breaker.{BREAKER_ID}.>", 1,
                                self._on_msg, batch=500)
        await self._feed.start()
        await asyncio.wait_for(self._feed.caught_up.wait(), timeout=60.0)

    async def stop(self) -> None:
        if self._feed is not None:
            await self._feed.stop()

    async def _on_msg(self, msg: Msg) -> None:
        seq = stream_seq(msg)
        try:
            event = bind_event(msg.subject, msg.data)
        except Exception:  # noqa: BLE001 - the projector dead-letters what it cannot read
            event = None
        async with self._applied:
            if isinstance(event, BreakerEvent):
                self.state = fold(self.state, event, seq)
            else:
                self.state = BreakerState(self.state.tripped, self.state.reset_at,
                                          self.state.reset_all_at, seq)
            self._applied.notify_all()

    def rebase(self, first_seq: int) -> None:
        """HERD_EVENTS was created again from ``first_seq`` (``control/streams_guard.py``):
        a version from the lost history names nothing there any more (the breaker's
        subject is empty), so the next trip or reset expects 0 (``projector/rebase.py``)."""
        state = self.state
        if 0 < state.version < first_seq:
            self.state = BreakerState(state.tripped, state.reset_at, state.reset_all_at, 0)

    async def wait_applied(self, seq: int, timeout: float = 10.0) -> None:
        async with self._applied:
            await asyncio.wait_for(self._applied.wait_for(lambda: self.state.version >= seq),
                                   timeout)


class Breaker:
    """The breaker on one control plane: the gate reactors ask, trips, resets, status.
    ``runner`` decides on the breaker aggregate and waits on ``fold`` (bootstrap builds
    it so)."""

    def __init__(self, fold: BreakerFold, nodes: Mapping[str, NodeView],
                 config: BreakerConfig, *, runner: DecideRunner, clock: Clock) -> None:
        self.fold = fold
        self.nodes = nodes
        self.config = config
        self.runner = runner
        self.clock = clock
        self.held = 0
        """``node.action_held`` events folded since this control plane started."""
        self._pending: dict[str, NodeActionHeld] = {}
        self._tripping: dict[str, asyncio.Task[None]] = {}

    @property
    def state(self) -> BreakerState:
        return self.fold.state

    async def start(self) -> None:
        await self.fold.start()

    async def stop(self) -> None:
        await self.fold.stop()
        tasks = list(self._tripping.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def rebase(self, first_seq: int) -> None:
        self.fold.rebase(first_seq)

    def gate(self, now: datetime) -> BreakerGate:
        """The gate as of ``now`` (a decision's ``context.now``): a value, read inside
        the decision, so a decision decided again after a conflict sees the fold anew."""
        return BreakerGate(self.state, self.nodes, self.config, now)

    def on_node_event(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        """A projector listener: counts holds (another replica's too) and trips the scope
        of a hold that is not open. Only the latest hold per scope waits its turn: one
        trip decision per scope runs at a time."""
        if not isinstance(event, NodeActionHeld):
            return
        self.held += 1
        if event.scope in self.state.tripped:
            return   # open already: nothing to decide
        self._pending[event.scope] = event
        if event.scope not in self._tripping:
            task = asyncio.get_running_loop().create_task(self._trip(event.scope))
            self._tripping[event.scope] = task

    async def _trip(self, scope: str) -> None:
        try:
            while (held := self._pending.pop(scope, None)) is not None:
                done = await self.runner.run("breaker", BREAKER_ID, self._deciding_trip(held))
                for event in done.events:
                    if isinstance(event, BreakerTripped):
                        log.error("circuit breaker tripped: %s", event.reason)
        except Exception:
            log.exception("recording the breaker's trip failed")
        finally:
            self._tripping.pop(scope, None)

    def _deciding_trip(self, held: NodeActionHeld) -> Callable[
            [Context], Decision[BreakerEvent] | None]:
        return lambda _: decide_trip(self.state, held, self.nodes.values(), self.config)

    async def reset(self, scope: str, reason: str, actor: str) -> Appended[BreakerEvent]:
        return await self.runner.run("breaker", BREAKER_ID,
                                     lambda _: decide_reset(self.state, scope, reason, actor))

    def tallies(self) -> dict[str, ScopeTally]:
        return tally(self.nodes.values(), self.state, self.clock.now(), self.config)

    def status(self) -> dict[str, object]:
        scopes = []
        for t in self.tallies().values():
            scopes.append({
                "scope": t.scope, "open": t.open, "size": t.size, "taken_out": t.taken_out,
                "limit": t.limit,
                "tripped_at": t.tripped.at.isoformat() if t.tripped is not None else None,
                "reason": t.tripped.reason if t.tripped is not None else ""})
        held = [{"node": v.id, "kind": v.held, "at": v.held_at.isoformat()}
                for v in self.nodes.values()
                if v.held and v.held_at is not None and since_reset(v, self.state)]
        return {"enabled": self.config.enabled, "max_share": self.config.max_share,
                "window_s": float(self.config.window), "min_nodes": self.config.min_nodes,
                "open": any(s["open"] for s in scopes), "scopes": scopes,
                "held": sorted(held, key=lambda h: str(h["node"]))}
