"""The sweeper: tracks heartbeats and appends liveness events at their deadlines.

Deadlines live in a heap with lazy re-arming: a heartbeat never touches the heap
unless the node has no entry; a popped entry whose node heartbeated since is pushed
again at its new deadline. No tick scans every node.

Clock (DESIGN §3): heartbeat age is measured on this process's monotonic clock from
when the heartbeat was observed. Heartbeats stored before this process started (read
back from HERD_HEARTBEATS) are aged against the NATS server's clock, read from the
JetStream timestamp of a probe message, so no clock skew matters.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.config import Config, grace_period, heartbeat_timeout
from herdbook.events.codec import AnyEvent, DecodeError, decode_heartbeat
from herdbook.events.feed import StreamFeed
from herdbook.events.node import NodeBootChecked, NodeEnabled, NodeEvent, NodeWiped
from herdbook.events.states import Intent, Lifecycle
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import (
    CLOCK_PROBE_SUBJECT,
    HEARTBEATS_STREAM,
    deadletter_subject,
)
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors import liveness
from herdbook.reactors.heartbeats import NodeBeat, is_newer
from herdbook.reactors.notifier import has_drain_status

log = logging.getLogger(__name__)

MAX_RECENT_BOOTS = 16



async def probe_server_clock(nc: NATS) -> datetime:
    """The NATS server's current time: the stored timestamp of a probe message."""
    js = nc.jetstream()
    ack = await js.publish(CLOCK_PROBE_SUBJECT, b"", stream=HEARTBEATS_STREAM)
    msg = await js.get_msg(HEARTBEATS_STREAM, ack.seq)
    assert msg.time is not None
    return msg.time


class Sweeper:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner,
                 config: Config, clock: Callable[[], float] = time.monotonic) -> None:
        self.nc = nc
        self.store = store
        self.projector = projector
        self.config = config
        self.clock = clock
        self.beats: dict[str, NodeBeat] = {}
        self.accepted = 0
        self.replays_dropped = 0
        self.undecodable = 0
        self.detections = 0
        self._heap: list[tuple[float, str]] = []
        self._armed: dict[str, float] = {}
        self._inflight: dict[str, float] = {}
        # When this process saw a node enter BOOTING (after a restart: when it started).
        self._booting_since: dict[str, float] = {}   # node -> clock when an append was sent
        self._ready_since: dict[str, float] = {}     # node -> clock when it became READY
        self._probe_time: datetime | None = None
        self._probe_clock = 0.0
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def timeouts(self, view: NodeView) -> liveness.Timeouts:
        node_class = view.info.node_class.value
        return liveness.Timeouts(heartbeat_timeout(self.config, node_class),
                                 grace_period(self.config, node_class),
                                 float(self.config.lifecycle.boot_timeout))

    async def start(self) -> None:
        self._probe_time = await probe_server_clock(self.nc)
        self._probe_clock = self.clock()
        self.projector.listeners.append(self._on_view_change)
        # Live heartbeats on a core subscription (the cheapest path: no consumer state;
        # a heartbeat lost to overload is tolerated by design), opened before the
        # snapshot so nothing falls between the two.
        self._sub = await self.nc.subscribe(
            "herd.hb.*", cb=self._on_live_heartbeat, pending_msgs_limit=1_000_000,
            pending_bytes_limit=256 * 1024 * 1024)
        # Then the last stored heartbeat of every node, aged on the server's clock.
        snapshot = StreamFeed(self.nc, HEARTBEATS_STREAM, "herd.hb.*", 1,
                              self._on_stored_heartbeat, batch=2000, last_per_subject=True)
        await snapshot.start()
        try:
            await asyncio.wait_for(snapshot.caught_up.wait(), timeout=120)
        finally:
            await snapshot.stop()
        # Arm after the snapshot: a node's clock starts at its last stored heartbeat,
        # or now if it never sent one.
        now = self.clock()
        for node_id, view in self.projector.views.items():
            if view.lifecycle is Lifecycle.BOOTING:
                self._booting_since[node_id] = now
            self._arm(node_id)
        self._task = asyncio.create_task(self._loop(), name="sweeper")

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - connection may already be gone
                pass
        if self._task is not None:
            self._task.cancel()
        for task in [self._task, *self._tasks]:
            if task is not None:
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass

    # heartbeats -------------------------------------------------------------
    async def _on_live_heartbeat(self, msg: Msg) -> None:
        await self._on_heartbeat(msg, self.clock())

    async def _on_stored_heartbeat(self, msg: Msg) -> None:
        await self._on_heartbeat(msg, self._observed_at(msg))

    async def _on_heartbeat(self, msg: Msg, observed: float) -> None:
        try:
            hb = decode_heartbeat(msg.data)
        except DecodeError as err:
            self.undecodable += 1
            await self.nc.publish(deadletter_subject(HEARTBEATS_STREAM), msg.data,
                                  headers={"Herd-Subject": msg.subject, "Herd-Error": str(err)})
            return
        node_id = msg.subject[len("herd.hb."):]
        if hb.node_id != node_id:
            self.undecodable += 1
            return
        if self.observe(node_id, hb.boot_id, hb.seq, observed, hb.sent_at):
            beat = self.beats[node_id]
            # While the agent reattaches its workloads its count is not yet known: a
            # draining node must not look empty (DRAINED) because of it.
            beat.running_allocs = None if hb.reattaching else hb.running_allocs
            beat.reattaching = hb.reattaching
            beat.gpu_count = hb.gpu_count
            if hb.fingerprint:
                beat.fingerprint = hb.fingerprint

    def _observed_at(self, msg: Msg) -> float:
        now = self.clock()
        if self._probe_time is None:
            return now
        stored = msg.metadata.timestamp
        if stored >= self._probe_time:
            return now
        # Stored before we started: its age is measured on the server's clock.
        age_at_probe = (self._probe_time - stored).total_seconds()
        return self._probe_clock - age_at_probe

    def observe(self, node_id: str, boot_id: str, seq: int, observed: float,
                sent_at: float = 0.0) -> bool:
        """Accept a heartbeat if (boot_id, seq) is newer; return whether it was."""
        beat = self.beats.get(node_id)
        if not is_newer(beat, boot_id, seq):
            self.replays_dropped += 1
            return False
        self.accepted += 1
        if beat is None:
            beat = NodeBeat(last_seen=observed, boot_id=boot_id, seq=seq, sent_at=sent_at)
            self.beats[node_id] = beat
        else:
            beat.last_seen = max(beat.last_seen, observed)
            beat.seq = seq
            beat.sent_at = sent_at
            if boot_id != beat.boot_id:
                beat.recent_boots = [beat.boot_id, *beat.recent_boots][:MAX_RECENT_BOOTS]
                beat.boot_id = boot_id
        view = self.projector.views.get(node_id)
        if view is not None:
            if (view.lifecycle is Lifecycle.DEGRADED or view.intent is Intent.DRAINING
                    or (view.lifecycle is Lifecycle.DOWN
                        and self.config.lifecycle.recover_down_on_heartbeat)):
                self._push(self.clock(), node_id)
            elif node_id not in self._armed:
                self._arm(node_id)
        return True

    def heartbeat_age(self, node_id: str) -> float | None:
        beat = self.beats.get(node_id)
        if beat is None or beat.boot_id == "":
            return None
        return max(0.0, self.clock() - beat.last_seen)

    # deadlines --------------------------------------------------------------
    def _on_view_change(self, node_id: str, view: NodeView | None, event: AnyEvent) -> None:
        if view is not None and view.lifecycle is Lifecycle.BOOTING:
            self._booting_since.setdefault(node_id, self.clock())
        else:
            self._booting_since.pop(node_id, None)
        if view is None or view.lifecycle is not Lifecycle.READY:
            self._ready_since.pop(node_id, None)
        elif isinstance(event, NodeBootChecked | NodeWiped | NodeEnabled):
            # A node that just became READY (booted, wiped, enabled) gets a full heartbeat
            # timeout from now, not from the last heartbeat of its previous boot.
            self._ready_since[node_id] = self.clock()
        if view is not None:
            if node_id not in self.beats:
                # Registered but never heartbeated: the clock starts at registration.
                self.beats[node_id] = NodeBeat(last_seen=self.clock(), boot_id="", seq=0)
            self._push(self.clock(), node_id)

    def _arm(self, node_id: str) -> None:
        view = self.projector.views.get(node_id)
        if view is None:
            return
        beat = self.beats.get(node_id)
        if beat is None:
            beat = self.beats[node_id] = NodeBeat(last_seen=self.clock(), boot_id="", seq=0)
        deadline = liveness.next_deadline(view, self._silent_since(node_id, beat),
                                          self.timeouts(view), self._booting_since.get(node_id))
        if deadline is not None:
            self._push(deadline, node_id)

    def _silent_since(self, node_id: str, beat: NodeBeat) -> float:
        """Since when the node counts as silent: its last heartbeat, or when it became
        READY if that is later."""
        return max(beat.last_seen, self._ready_since.get(node_id, beat.last_seen))

    def _push(self, deadline: float, node_id: str) -> None:
        armed = self._armed.get(node_id)
        if armed is not None and armed <= deadline:
            return
        self._armed[node_id] = deadline
        heapq.heappush(self._heap, (deadline, node_id))

    async def _loop(self) -> None:
        interval = float(self.config.lifecycle.sweep_interval)
        while True:
            try:
                self.sweep()
            except Exception:
                log.exception("sweep failed")
            await asyncio.sleep(interval)

    def sweep(self) -> None:
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, node_id = heapq.heappop(heap)
            if self._armed.get(node_id) != deadline:
                continue  # superseded by an earlier entry
            del self._armed[node_id]
            self._evaluate(node_id, now)

    def _evaluate(self, node_id: str, now: float) -> None:
        view = self.projector.views.get(node_id)
        if view is None:
            return
        sent = self._inflight.get(node_id)
        if sent is not None:
            if now - sent < 5.0:
                self._push(now + 0.2, node_id)   # our last append is not folded yet
                return
            del self._inflight[node_id]
        beat = self.beats.get(node_id)
        if beat is None:
            self._arm(node_id)
            return
        booting_since = self._booting_since.get(node_id)
        seen = liveness.Observation(
            heartbeat_age=now - self._silent_since(node_id, beat), boot_id=beat.boot_id,
            running_allocs=beat.running_allocs,
            booting_for=None if booting_since is None else now - booting_since)
        events = liveness.decide(view, seen, self.timeouts(view),
                                 self.config.lifecycle.recover_down_on_heartbeat,
                                 drained_by_heartbeat=not has_drain_status(self.config.notifier))
        if events:
            self._inflight[node_id] = now
            self._spawn(self._append(node_id, view, events))
        else:
            self._arm(node_id)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _append(self, node_id: str, view: NodeView, events: list[NodeEvent]) -> None:
        try:
            version = await self.store.append_decided(events, view.version)
            self.detections += len(events)
            await self.projector.wait_applied(version, timeout=5.0)
        except ConflictError:
            log.debug("%s: another writer moved first; deciding again", node_id)
        except Exception:
            log.exception("liveness append for %s failed", node_id)
        finally:
            self._inflight.pop(node_id, None)
            self._push(self.clock(), node_id)
