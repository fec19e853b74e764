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
place of the action, once per node and kind until the next reset; the first hold of a
scope trips it (``breaker.tripped``). A tripped scope holds every automatic action until
an operator resets it (``herd breaker reset``): a window that passes does not close it.
After a reset, held actions are not replayed: they are decided again on the node's next
report (health) or the next reconcile or conformance round, counted from the reset.
Operators' own commands never pass through here.

The breaker's own state (trips and resets) is a fold of ``herd.breaker.>`` that this
reactor reads from the start of the stream on every start (a handful of events).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.clock import SYSTEM_CLOCK, Clock
from herdbook.config import BreakerConfig
from herdbook.events.authority import bind_event
from herdbook.events.breaker import (
    BREAKER_ID,
    FLEET,
    BreakerEvent,
    BreakerReset,
    BreakerTripped,
    HeldAction,
    NodeActionHeld,
    pool_scope,
)
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.node import NodeEvent
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.events.store import EventStore
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.node_view import NodeView
from herdbook.reactors.runner import Appended, DecideRunner, Decision

log = logging.getLogger(__name__)

AUTOMATIC_DRAINERS = frozenset({"sensitive"})
"""Actors whose drains are automatic take-outs (``reactors/sensitive.py``'s ACTOR)."""


class BreakerState:
    """The fold of the breaker aggregate. Immutable by convention: ``fold`` returns a new
    one."""

    __slots__ = ("reset_all_at", "reset_at", "tripped", "version")

    def __init__(self, tripped: Mapping[str, BreakerTripped] | None = None,
                 reset_at: Mapping[str, datetime] | None = None,
                 reset_all_at: datetime | None = None, version: int = 0) -> None:
        self.tripped: dict[str, BreakerTripped] = dict(tripped or {})
        self.reset_at: dict[str, datetime] = dict(reset_at or {})
        self.reset_all_at = reset_all_at
        self.version = version

    def last_reset(self, scope: str) -> datetime | None:
        times = [t for t in (self.reset_all_at, self.reset_at.get(scope)) if t is not None]
        return max(times, default=None)


def fold(state: BreakerState, event: BreakerEvent, seq: int) -> BreakerState:
    match event:
        case BreakerTripped(scope=scope):
            return BreakerState({**state.tripped, scope: event}, state.reset_at,
                                state.reset_all_at, seq)
        case BreakerReset(scope=""):
            return BreakerState({}, state.reset_at, event.at, seq)
        case BreakerReset(scope=scope):
            tripped = {k: v for k, v in state.tripped.items() if k != scope}
            return BreakerState(tripped, {**state.reset_at, scope: event.at},
                                state.reset_all_at, seq)
    return BreakerState(state.tripped, state.reset_at, state.reset_all_at, seq)


def scopes_of(view: NodeView) -> list[str]:
    pool = view.info.labels.get("pool", "")
    return [FLEET, pool_scope(pool)] if pool else [FLEET]


def counted(view: NodeView) -> bool:
    """In its scopes' size: an approved compute node that is not TERMINATED."""
    return (view.type is NodeType.COMPUTE and view.approval is Approval.APPROVED
            and view.lifecycle is not Lifecycle.TERMINATED)


def taken_out_at(view: NodeView) -> datetime | None:
    """When the node was last taken out automatically, if it is out now."""
    times: list[datetime] = []
    if view.health is Health.UNHEALTHY and view.health_at is not None:
        times.append(view.health_at)
    if (view.intent in (Intent.DRAINING, Intent.DRAINED) and view.intent_at is not None
            and view.intent_actor in AUTOMATIC_DRAINERS):
        times.append(view.intent_at)
    return max(times, default=None)


def limit_of(size: int, config: BreakerConfig) -> int:
    return max(config.min_nodes, math.floor(config.max_share * size + 1e-9))


@dataclass(frozen=True)
class ScopeTally:
    scope: str
    size: int
    taken_out: int
    limit: int
    tripped: BreakerTripped | None = None

    @property
    def open(self) -> bool:
        return self.tripped is not None


def tally(nodes: Iterable[NodeView], state: BreakerState, now: datetime,
          config: BreakerConfig, only: Iterable[str] | None = None) -> dict[str, ScopeTally]:
    """Per scope (``only`` those, else every scope seen and the fleet): its size, its
    automatic take-outs within the window and since its last reset, its limit."""
    wanted = None if only is None else set(only)
    window_start = now - timedelta(seconds=float(config.window))
    size: dict[str, int] = {FLEET: 0}
    out: dict[str, int] = {FLEET: 0}
    for view in nodes:
        if not counted(view):
            continue
        taken = taken_out_at(view)
        for scope in scopes_of(view):
            if wanted is not None and scope not in wanted:
                continue
            size[scope] = size.get(scope, 0) + 1
            out.setdefault(scope, 0)
            if taken is not None and taken >= window_start:
                reset = state.last_reset(scope)
                if reset is None or taken >= reset:
                    out[scope] += 1
    for scope in state.tripped:
        size.setdefault(scope, 0)
        out.setdefault(scope, 0)
    return {scope: ScopeTally(scope, size[scope], out[scope], limit_of(size[scope], config),
                              state.tripped.get(scope))
            for scope in sorted(size) if wanted is None or scope in wanted}


@dataclass(frozen=True)
class Hold:
    """Why an automatic action is held: the scope that holds it and its tally."""

    tally: ScopeTally
    window: float

    @property
    def reason(self) -> str:
        t = self.tally
        taken_out, size, limit = ((t.tripped.taken_out, t.tripped.size, t.tripped.limit)
                                  if t.tripped is not None else (t.taken_out, t.size, t.limit))
        share = 100 * taken_out / size if size else 0.0
        limit_share = 100 * limit / size if size else 0.0
        reason = (f"breaker open ({t.scope}): {taken_out} of {size} nodes ({share:.0f}%) taken "
                  f"out automatically in {_duration(self.window)}, limit {limit} "
                  f"({limit_share:.0f}%)")
        return reason + ("; held until `herd breaker reset`" if t.tripped is not None else "")


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def check(view: NodeView, nodes: Iterable[NodeView], state: BreakerState, now: datetime,
          config: BreakerConfig, kind: HeldAction = HeldAction.UNHEALTHY) -> Hold | None:
    """Whether one more automatic take-out of ``view`` is held, and by which scope. A
    replacement follows a take-out already counted: it is held only while one of the
    node's scopes is open. Otherwise a node already out is not held again."""
    if not config.enabled:
        return None
    scopes = scopes_of(view)
    for scope in scopes:
        if scope in state.tripped:
            tripped = tally(nodes, state, now, config, only=[scope])[scope]
            return Hold(tripped, float(config.window))
    if kind is HeldAction.REPLACE or taken_out_at(view) is not None:
        return None
    for t in tally(nodes, state, now, config, only=scopes).values():
        if t.taken_out + 1 > t.limit:
            return Hold(t, float(config.window))
    return None


def held_instead(view: NodeView, kind: HeldAction, hold: Hold, would: str,
                 state: BreakerState) -> list[NodeEvent]:
    """The ``node.action_held`` to append instead of the action: none if this node's
    action of this kind was held already since the scope's last reset."""
    reset = state.last_reset(hold.tally.scope)
    if view.held == kind.value and view.held_at is not None and (
            reset is None or view.held_at >= reset):
        return []
    return [NodeActionHeld(node_id=view.id, actor=ACTOR, kind=kind, scope=hold.tally.scope,
                           reason=hold.reason, would=would)]


ACTOR = "breaker"


def decide_trip(state: BreakerState, hold: Hold) -> Decision[BreakerEvent] | None:
    t = hold.tally
    if t.scope in state.tripped:
        return None
    return Decision(state.version, [BreakerTripped(
        scope=t.scope, taken_out=t.taken_out, size=t.size, limit=t.limit, reason=hold.reason,
        actor=ACTOR)])


def decide_reset(state: BreakerState, scope: str, reason: str,
                 actor: str) -> Decision[BreakerEvent]:
    """Always recorded: a reset also restarts the count of a closed scope."""
    return Decision(state.version, [BreakerReset(scope=scope, reason=reason, actor=actor)])


Gate = Callable[[NodeView, HeldAction, str], list[NodeEvent] | None]
"""What a decider asks before an automatic take-out of a node: ``None`` to go on, else
the events to append instead (``node.action_held``, or nothing if already held)."""


@dataclass
class Breaker:
    """The breaker on one control plane: its fold, the gate deciders ask, trips."""

    nc: NATS
    store: EventStore
    nodes: Mapping[str, NodeView]
    config: BreakerConfig
    clock: Clock = SYSTEM_CLOCK
    state: BreakerState = field(default_factory=BreakerState)
    held: int = 0
    """``node.action_held`` events folded since this control plane started."""

    def __post_init__(self) -> None:
        self.runner = DecideRunner(self.store, self, self.clock)
        self._feed: StreamFeed | None = None
        self._applied = asyncio.Condition()
        self._trips: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._feed = StreamFeed(self.nc, EVENTS_STREAM, f"herd.breaker.{BREAKER_ID}.>", 1,
                                self._on_msg, batch=500)
        await self._feed.start()
        await asyncio.wait_for(self._feed.caught_up.wait(), timeout=60.0)

    async def stop(self) -> None:
        if self._feed is not None:
            await self._feed.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

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

    def gate(self, view: NodeView, kind: HeldAction, would: str) -> list[NodeEvent] | None:
        hold = check(view, self.nodes.values(), self.state, self.clock.now(), self.config, kind)
        if hold is None:
            return None
        events = held_instead(view, kind, hold, would, self.state)
        if events and hold.tally.scope not in self.state.tripped:
            self._trip_soon(hold)
        return events

    def on_node_event(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        """A projector listener: counts holds (another replica's too)."""
        if isinstance(event, NodeActionHeld):
            self.held += 1

    def _trip_soon(self, hold: Hold) -> None:
        if hold.tally.scope in self._trips:
            return
        self._trips.add(hold.tally.scope)
        task = asyncio.get_running_loop().create_task(self._trip(hold))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _trip(self, hold: Hold) -> None:
        try:
            done = await self.runner.run("breaker", BREAKER_ID,
                                         lambda _: decide_trip(self.state, hold))
            if done.events:
                log.error("circuit breaker tripped: %s", hold.reason)
        except Exception:
            log.exception("recording the breaker's trip failed")
        finally:
            self._trips.discard(hold.tally.scope)

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
                if v.held and v.held_at is not None and _since_reset(v, self.state)]
        return {"enabled": self.config.enabled, "max_share": self.config.max_share,
                "window_s": float(self.config.window), "min_nodes": self.config.min_nodes,
                "open": any(s["open"] for s in scopes), "scopes": scopes,
                "held": sorted(held, key=lambda h: str(h["node"]))}


def _since_reset(view: NodeView, state: BreakerState) -> bool:
    assert view.held_at is not None
    resets = [state.last_reset(scope) for scope in scopes_of(view)]
    return all(r is None or view.held_at >= r for r in resets)

