"""``status`` and ``view.rebuild``: the control plane about itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

import herdbook
from herdbook.clock import Clock
from herdbook.events.store import stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.projector.score import fleet_score
from herdbook.reactors.breaker import Breaker
from herdbook.reactors.sweeper import Sweeper

Handler = Callable[[bytes], Awaitable[Any]]


class AdminRoutes:
    def __init__(self, nc: NATS, projector: ProjectorRunner, sweeper: Sweeper,
                 rebuild: Callable[[], Awaitable[dict[str, Any]]], instance: str,
                 is_leader: Callable[[], bool], clock: Clock,
                 breaker: Breaker | None = None,
                 repairs: Callable[[], dict[str, Any]] | None = None,
                 waiting: Callable[[NodeView], bool] | None = None) -> None:
        self.nc = nc
        self.waiting = waiting
        """Whether a node waits for its validation check (out of service: the score)."""
        self.repairs = repairs
        """The last 7 days' repair percentiles and availability (``api/repair_routes.py``)."""
        self.breaker = breaker
        self.projector = projector
        self.sweeper = sweeper
        self.rebuild = rebuild
        self.instance = instance
        self.is_leader = is_leader
        self.clock = clock
        self.started = clock.monotonic()

    def routes(self) -> dict[str, Handler]:
        return {"status": self.status, "view.rebuild": self.view_rebuild}

    async def view_rebuild(self, data: bytes) -> dict[str, Any]:
        return await self.rebuild()

    async def status(self, data: bytes) -> dict[str, Any]:
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        return {
            "instance": self.instance,
            "version": herdbook.__version__,
            "nodes": len(self.projector.nodes),
            "stream_last_seq": last,
            "projector_seq": self.projector.committed_seq,
            "projector_lag": max(0, last - self.projector.committed_seq),
            "projector_failed": self.projector.failed,
            "deadletters": self.projector.deadletters,
            **self.sweeper.stats(),
            **self.sweeper.shard_status(),
            "liveness_detections": self.sweeper.detections,
            "uptime_s": round(self.clock.monotonic() - self.started, 1),
            "leader": self.is_leader(),
            "health_score": msgspec.to_builtins(fleet_score(self.projector.nodes.values(),
                                                            self.waiting)),
            "breaker_open": self.breaker is not None and bool(self.breaker.state.tripped),
            **({"repairs": self.repairs()} if self.repairs is not None else {}),
        }
