"""The sweeper per liveness shard (DESIGN §10; ``reactors.sweeper`` is the rest of it).

With ``lifecycle.liveness_shards`` > 1 the sweeper sweeps only the nodes of the shards
this replica holds: ``take`` and ``release``, driven by the shard leases
(``control.shards``). Taking a shard over begins observing its nodes exactly as a start
does: none counts as silent before the takeover.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any

from herdbook.clock import Clock
from herdbook.events.states import Lifecycle
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors import liveness
from herdbook.reactors.deadlines import Deadlines
from herdbook.reactors.heartbeat_intake import HeartbeatIntake

log = logging.getLogger("herdbook.reactors.sweeper")

OBSERVE_SLICE = 2000
"""Nodes a shard's takeover goes through between two yields to the event loop."""


class ShardSweeping:
    """The sweeper's shard handling, a part of ``Sweeper`` (which provides these)."""

    intake: HeartbeatIntake
    projector: ProjectorRunner
    clock: Clock
    deadlines: Deadlines
    shards: int
    taken: dict[int, float]
    shards_taken: int
    shard_holders: Callable[[], dict[str, str]]
    _booting_since: dict[str, float]

    def timeouts(self, view: NodeView) -> liveness.Timeouts:
        raise NotImplementedError

    def shortest_timeout(self) -> float:
        raise NotImplementedError

    def _arm(self, node_id: str, after: float = -math.inf) -> None:
        raise NotImplementedError

    @property
    def held(self) -> list[int]:
        """The shards swept here."""
        return sorted(self.intake.held)

    async def take(self, shard: int) -> None:
        """Sweep one more shard (its lease was won): read its heartbeats, then observe
        its nodes for one heartbeat timeout before declaring any, as after a start. The
        nodes are gone through in slices that yield to the loop: at 100k nodes a single
        pass holds it for seconds, long enough for this replica's leases to lapse."""
        if shard in self.intake.held:
            return
        self.shards_taken += 1
        # Observed from now: the live subscription opens first, and the stored heartbeats
        # read after it (seconds at 100k nodes) cover what came before.
        now = self.taken[shard] = self.clock.monotonic()
        await self.intake.open(shard)
        every = list(self.projector.nodes)
        observed = 0
        for i in range(0, len(every), OBSERVE_SLICE):
            observed += self._observe_nodes(shard, every[i:i + OBSERVE_SLICE], now)
            await asyncio.sleep(0)
        self._log_taken(shard, observed)

    def observe_shard(self, shard: int) -> None:
        """``take`` after the shard's heartbeats are read, in one pass (tests)."""
        now = self.taken[shard] = self.clock.monotonic()
        self._log_taken(shard, self._observe_nodes(shard, list(self.projector.nodes), now))

    def _log_taken(self, shard: int, nodes: int) -> None:
        log.info("took liveness shard %d (%d nodes): observing them for one heartbeat "
                 "timeout (%gs) before declaring any DEGRADED", shard, nodes,
                 self.shortest_timeout())

    def _observe_nodes(self, shard: int, node_ids: list[str], now: float) -> int:
        """Arm the nodes of ``shard`` among ``node_ids``, none silent before ``now``."""
        count = 0
        for node_id in node_ids:
            view = self.projector.nodes.get(node_id)
            if view is None or self.intake.shard(node_id) != shard:
                continue
            count += 1
            self.intake.known(node_id, view)
            since = self._booting_since.get(node_id)
            if since is None and view.lifecycle is Lifecycle.BOOTING:
                self._booting_since[node_id] = now    # booting since before this start
            elif since is not None:   # a boot timeout, too, waits for the observation
                t = self.timeouts(view)
                self._booting_since[node_id] = max(
                    since, now + t.heartbeat_timeout - t.boot_timeout)
            self._arm(node_id)
        return count

    async def release(self, shard: int) -> None:
        """Stop sweeping a shard (its lease was lost or handed over)."""
        self.taken.pop(shard, None)
        for node_id in await self.intake.close(shard):
            self.deadlines.forget(node_id)
        log.info("released liveness shard %d", shard)

    def shard_status(self) -> dict[str, Any]:
        """For status: the shard count, those swept here, and who holds each."""
        return {"liveness_shards": self.shards, "liveness_shards_held": self.held,
                "liveness_shards_taken": self.shards_taken,
                **({"liveness_shard_holders": self.shard_holders()} if self.shards > 1
                   else {})}
