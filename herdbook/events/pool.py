"""Pool events (aggregate ``pool``): the operator's desired size of a pool."""

from __future__ import annotations

from typing import ClassVar

from herdbook.events.base import Event


class PoolEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "pool"

    pool: str

    @property
    def aggregate_id(self) -> str:
        return self.pool


class PoolScaled(PoolEvent, frozen=True, kw_only=True, tag="pool.scaled"):
    """`herd pool scale <pool> N`: the reconciler keeps N instances (within min/max)."""

    size: int
    reason: str = ""
