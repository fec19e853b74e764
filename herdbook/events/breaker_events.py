"""The fleet-wide circuit breaker's events.

- ``node.action_held`` (aggregate ``node``): an automatic action (UNHEALTHY from the
  health policy, an auto-replace, a conformance drain) that the open breaker held
  instead of carrying out; ``kind`` names it, ``reason`` says why. Appended in the
  node's decision in place of the action.
- ``breaker.tripped`` / ``breaker.reset`` (aggregate ``breaker``, one id: ``fleet``):
  a scope (``fleet`` or ``pool:<name>``) opened; an operator closed one scope, or
  every scope (``scope`` empty).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from herdbook.events.base import Event
from herdbook.events.node import NodeEvent

BREAKER_ID = "fleet"
"""The breaker aggregate's one id: every scope's trips and resets are ordered in it."""
FLEET = "fleet"


class HeldAction(StrEnum):
    UNHEALTHY = "unhealthy"
    REPLACE = "replace"
    DRAIN = "drain"
    QUARANTINE = "quarantine"   # a node that failed validation again (reactors/validation.py)


def pool_scope(pool: str) -> str:
    return f"pool:{pool}"


class NodeActionHeld(NodeEvent, frozen=True, kw_only=True, tag="node.action_held"):
    """What would have happened (``kind``, ``would``) and why it did not (``reason``)."""

    kind: HeldAction
    scope: str = FLEET
    reason: str = ""
    would: str = ""


class BreakerEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "breaker"

    breaker: str = BREAKER_ID

    @property
    def aggregate_id(self) -> str:
        return self.breaker


class BreakerTripped(BreakerEvent, frozen=True, kw_only=True, tag="breaker.tripped"):
    scope: str
    taken_out: int
    size: int
    limit: int
    reason: str = ""


class BreakerReset(BreakerEvent, frozen=True, kw_only=True, tag="breaker.reset"):
    scope: str = ""
    """The scope closed; empty: every scope."""
    reason: str = ""
