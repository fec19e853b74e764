"""The circuit breaker's pure core (``reactors/breaker.py`` is its shell): the fold of
its events, the tally of each scope, whether an automatic take-out is held, the trip a
hold leads to and an operator's reset. Every function here takes the time it decides at
(a decision's ``context.now``) and returns data: nothing reads a clock, starts a task or
appends (tests/unit/test_deciders_pure.py runs each twice on the same input).

- A decider asks the gate (``BreakerGate``: the breaker's fold, the node view, the
  config and the decision's time) before an automatic take-out; a hold comes back as the
  ``node.action_held`` to append in the node's decision instead.
- The trip follows from that event once folded: ``decide_trip`` on the breaker aggregate
  at the fold's version, so a retried decision, or every replica deciding on the same
  hold, records one ``breaker.tripped``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from herdbook.config import BreakerConfig
from herdbook.events.breaker_events import (
    FLEET,
    BreakerEvent,
    BreakerReset,
    BreakerTripped,
    HeldAction,
    NodeActionHeld,
    pool_scope,
)
from herdbook.events.node import NodeEvent
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Decision

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


def decide_reset(state: BreakerState, scope: str, reason: str,
                 actor: str) -> Decision[BreakerEvent]:
    """Always recorded: a reset also restarts the count of a closed scope."""
    return Decision(state.version, [BreakerReset(scope=scope, reason=reason, actor=actor)])


def decide_trip(state: BreakerState, held: NodeActionHeld, nodes: Iterable[NodeView],
                config: BreakerConfig) -> Decision[BreakerEvent] | None:
    """The trip a folded hold leads to: its scope opens, with the tally at the time of
    the hold, unless the scope is open already or was reset after the hold (an operator
    who reset it had seen it). Decided at the fold's version: of two replicas, or two
    tries, deciding on holds in one scope, the second conflicts, catches up and finds the
    scope open."""
    scope = held.scope
    if scope in state.tripped:
        return None
    reset = state.last_reset(scope)
    if reset is not None and held.at < reset:
        return None
    t = tally(nodes, state, held.at, config, only=[scope]).get(
        scope, ScopeTally(scope, 0, 0, limit_of(0, config)))
    return Decision(state.version, [BreakerTripped(
        scope=scope, taken_out=t.taken_out, size=t.size, limit=t.limit,
        reason=Hold(t, float(config.window)).reason, actor=ACTOR)])


Holds = Callable[[NodeView, HeldAction, str], list[NodeEvent] | None]
"""What a decider asks before an automatic take-out of a node: ``None`` to go on, else
the events to append instead (``node.action_held``, or nothing if already held)."""


@dataclass(frozen=True)
class BreakerGate:
    """The breaker as one decision sees it (a ``Holds``): its fold, the node view, its
    config and the decision's time. A value: asking it twice answers the same."""

    state: BreakerState
    nodes: Mapping[str, NodeView]
    config: BreakerConfig
    now: datetime

    def __call__(self, view: NodeView, kind: HeldAction, would: str) -> list[NodeEvent] | None:
        hold = check(view, self.nodes.values(), self.state, self.now, self.config, kind)
        return None if hold is None else held_instead(view, kind, hold, would, self.state)


Gate = Callable[[datetime], Holds]
"""What a reactor holds: the breaker's gate at a decision's time (``context.now``),
asked inside the decision so that a decision decided again sees the fold anew."""


def since_reset(view: NodeView, state: BreakerState) -> bool:
    """The node's last hold came after the last reset of each of its scopes."""
    assert view.held_at is not None
    resets = [state.last_reset(scope) for scope in scopes_of(view)]
    return all(r is None or view.held_at >= r for r in resets)


def gate_at(gate: Gate | None, now: datetime) -> Holds | None:
    """What a reactor hands its decider: the gate at the decision's time, if any."""
    return None if gate is None else gate(now)
