"""Per-GPU telemetry in: the latest ``GpuTelemetry`` of every known node, in memory
(DESIGN §10 "Telemetry is state, not decisions": nothing of it is appended to
HERD_EVENTS).

Read as the heartbeats are (``heartbeat_intake``): live on a core subscription to
``herd.gpu.*`` (no consumer state), opened before the last stored message of every
subject is read back from HERD_HEARTBEATS, so a restarted control plane answers ``herd
gpu list`` with readings at once. A stored sample never replaces one heard live.

Bounded by the fleet, not by what is published: a body its subject does not vouch for
(``authority.bind_telemetry``: undecodable, another node's, no GPU) is dead-lettered to
``herd.deadletter.HERD_HEARTBEATS`` and counted; one of a node not in the view is only
counted and keeps nothing; a node deleted from the view is forgotten. Every replica
keeps its own copy, so any of them answers the GPU API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.clock import Clock
from herdbook.events.authority import bind_telemetry
from herdbook.events.deadletters import DeadLetters
from herdbook.events.feed import StreamFeed
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import HEARTBEATS_STREAM
from herdbook.events.telemetry import GpuTelemetry
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_ring import TelemetryRing

log = logging.getLogger(__name__)

SUBJECTS = "herd.gpu.*"
SNAPSHOT_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class Sample:
    telemetry: GpuTelemetry
    received_at: float
    """When it reached NATS (stored ones: HERD_HEARTBEATS' timestamp, the server's clock)
    or this process (live ones), epoch seconds."""
    live: bool


class TelemetryIntake:
    """``latest``: per known node, its last accepted sample."""

    def __init__(self, nc: NATS, nodes: Mapping[str, NodeView], clock: Clock) -> None:
        self.nc = nc
        self.nodes = nodes
        self.clock = clock
        self.latest: dict[str, Sample] = {}
        self.ring = TelemetryRing()
        """The last samples of every node's GPUs, for the console's charts."""
        self.accepted = 0
        self.unknown_dropped = 0
        self.dead_letters = DeadLetters(nc, HEARTBEATS_STREAM, clock=clock.monotonic,
                                        logger=log)
        self._sub: Any = None
        self._watchers: list[set[str]] = []

    def watch(self) -> set[str]:
        """A set the intake adds each node id to whose latest sample changed (accepted or
        forgotten); the reader takes the ids out (``/v1/fleet``: only those rows' GPU
        numbers are looked at, issue 32 item 3)."""
        ids: set[str] = set()
        self._watchers.append(ids)
        return ids

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(
            SUBJECTS, cb=self.on_live, pending_msgs_limit=1_000_000,
            pending_bytes_limit=512 * 1024 * 1024)
        snapshot = StreamFeed(self.nc, HEARTBEATS_STREAM, SUBJECTS, 1, self.on_stored,
                              batch=2000, last_per_subject=True)
        await snapshot.start()
        try:
            await asyncio.wait_for(snapshot.caught_up.wait(), timeout=SNAPSHOT_TIMEOUT)
        finally:
            await snapshot.stop()

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone already
                pass
            self._sub = None

    async def on_live(self, msg: Msg) -> None:
        await self._take(msg, self.clock.now().timestamp(), live=True)

    async def on_stored(self, msg: Msg) -> None:
        try:
            stored = msg.metadata.timestamp.timestamp()
        except Exception:  # noqa: BLE001 - not a JetStream message: now
            stored = self.clock.now().timestamp()
        await self._take(msg, stored, live=False)

    async def _take(self, msg: Msg, received_at: float, *, live: bool) -> None:
        try:
            telemetry = bind_telemetry(msg.subject, msg.data)
        except Exception as err:  # noqa: BLE001 - any garbage, RecursionError included
            await self.dead_letters.send(msg, f"{type(err).__name__}: {err}")
            return
        self.accept(telemetry, received_at, live=live)

    def accept(self, telemetry: GpuTelemetry, received_at: float, *, live: bool) -> bool:
        """Keep ``telemetry`` (its subject vouched for it) as its node's latest, if the
        node is known and nothing newer was heard live."""
        node_id = telemetry.node_id
        if node_id not in self.nodes:
            self.unknown_dropped += 1
            return False
        old = self.latest.get(node_id)
        if not live and old is not None and old.live:
            return False
        self.latest[node_id] = Sample(telemetry, received_at, live)
        for ids in self._watchers:
            ids.add(node_id)
        self.ring.add(telemetry, received_at)
        self.accepted += 1
        return True

    def on_node_event(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        """A projector listener: a node that left the view is forgotten."""
        if view is None:
            self.latest.pop(node_id, None)
            for ids in self._watchers:
                ids.add(node_id)
            self.ring.forget(node_id)

    def subscribe_to(self, nodes: Any) -> Callable[[], None]:
        unsubscribe: Callable[[], None] = nodes.subscribe(self.on_node_event)
        return unsubscribe

    def of(self, node_id: str) -> Sample | None:
        return self.latest.get(node_id)

    @property
    def deadlettered(self) -> int:
        return self.dead_letters.count
