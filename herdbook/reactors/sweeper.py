"""The sweeper: tracks heartbeats and appends liveness events at their deadlines.

Deadlines live in a heap with lazy re-arming: a heartbeat never touches the heap
unless the node has no entry; a popped entry whose node heartbeated since is pushed
again at its new deadline. No tick scans every node.

Clock (DESIGN §3): heartbeat age is measured on this process's monotonic clock from
when the heartbeat was observed. Heartbeats stored before this process started (read
back from HERD_HEARTBEATS) are aged against the NATS server's clock, read from the
JetStream timestamp of a probe message, so no clock skew matters.

Observation before declaration (DESIGN §9): absence of evidence while this process could
not see heartbeats is no evidence. So when it starts, when its loop finds its own clock
jumped (the process was stopped, suspended or starved: it woke much later than it slept
for) and when its NATS connection comes back, every node counts as last seen then: a
node that heartbeats within one heartbeat timeout stays READY with no event, one that
does not is declared DEGRADED at that instant + its timeout and DOWN after its grace.

Bounded by the fleet, not by what is published (``reactors.heartbeats``): a heartbeat
its subject does not vouch for is dead-lettered; one of a node not in the view is only
counted, and keeps no state; one of a boot the node has not announced is dropped, the
latest kept per known node until its announcement is folded. A failing append is retried
with a growing delay per node and logged once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.config import Config, grace_period, heartbeat_timeout
from herdbook.events.authority import bind_node_report
from herdbook.events.codec import decode_heartbeat
from herdbook.events.deadletters import DeadLetters
from herdbook.events.feed import StreamFeed
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeEnabled, NodeEvent, NodeWiped
from herdbook.events.states import Intent, Lifecycle
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import (
    CLOCK_PROBE_SUBJECT,
    HEARTBEATS_STREAM,
    ID_PATTERN,
    printable,
)
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors import liveness
from herdbook.reactors.heartbeats import NodeBeat, Verdict, is_newer, judge
from herdbook.reactors.notifier import has_drain_status

log = logging.getLogger(__name__)

MAX_RECENT_BOOTS = 16
APPEND_RETRY_FIRST = 1.0
APPEND_RETRY_MAX = 60.0
"""A liveness append that fails (not a conflict) is retried after 1s, 2s, 4s ... 60s."""
JUMP_FLOOR = 2.0
"""The loop waking this much later than it slept for (or half the shortest heartbeat
timeout, if longer) means this process was away: stopped, suspended or starved."""


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
        self._unsubscribe: Callable[[], None] | None = None
        self.store = store
        self.projector = projector
        self.config = config
        self.clock = clock
        self.beats: dict[str, NodeBeat] = {}   # known nodes only
        self.accepted = 0
        self.replays_dropped = 0
        self.unknown_dropped = 0        # heartbeats of nodes not in the view
        self.unannounced_dropped = 0    # heartbeats of a boot the node has not announced
        self.dead_letters = DeadLetters(nc, HEARTBEATS_STREAM, clock=clock, logger=log)
        self.detections = 0
        self.reobservations = 0   # clock jumps and reconnections seen since start
        # Nothing counts as silence before this (``reobserve``): set at start.
        self._observing_since = -float("inf")
        self._disconnected = False
        # The latest heartbeat of an unannounced boot per known node, with when it was
        # observed: accepted if its boot's announcement is folded after it (a race).
        self._unannounced: dict[str, tuple[Heartbeat, float]] = {}
        # node -> (delay, not before) after its last append failed
        self._append_backoff: dict[str, tuple[float, float]] = {}
        self._sweep_error_logged = -float("inf")
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
        self._unsubscribe = self.projector.nodes.subscribe(self._on_view_change)
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
        self.begin_observing()
        self._task = asyncio.create_task(self._loop(), name="sweeper")

    def begin_observing(self) -> None:
        """Arm every node once the stored heartbeats are read. A node's silence starts no
        earlier than now: its last stored heartbeat may be old only because this control
        plane was down, so it is declared DEGRADED at the earliest one heartbeat timeout
        from now; a BOOTING node's boot timeout starts now."""
        now = self.clock()
        self._observing_since = now
        if self.projector.nodes:
            log.info("observing %d nodes for one heartbeat timeout (%gs) before declaring "
                     "any DEGRADED", len(self.projector.nodes), self.shortest_timeout())
        for node_id, view in self.projector.nodes.items():
            if view.lifecycle is Lifecycle.BOOTING:
                self._booting_since[node_id] = now
            self._arm(node_id)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
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
            bind_node_report(msg.subject, hb.node_id)
            if not ID_PATTERN.fullmatch(hb.boot_id):
                raise ValueError("the boot id is not a valid id")
        except Exception as err:  # noqa: BLE001 - any garbage, RecursionError included
            await self.dead_letters.send(msg, f"{type(err).__name__}: {err}")
            return
        self.accept(hb, observed)

    @property
    def deadlettered(self) -> int:
        return self.dead_letters.count

    def stats(self) -> dict[str, int]:
        """The heartbeat counters since start, for status and metrics."""
        return {"heartbeats_accepted": self.accepted,
                "heartbeat_replays_dropped": self.replays_dropped,
                "heartbeat_unknown_node_dropped": self.unknown_dropped,
                "heartbeat_unannounced_boot_dropped": self.unannounced_dropped,
                "heartbeat_deadletters": self.deadlettered,
                "liveness_reobservations": self.reobservations}

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

    def accept(self, hb: Heartbeat, observed: float) -> Verdict:
        """Judge a heartbeat its subject vouches for (``reactors.heartbeats``) and, if it
        counts, record it and re-arm its node."""
        node_id = hb.node_id
        view = self.projector.nodes.get(node_id)
        if view is None:
            # Before any per-node state: garbage for made-up ids costs a counter. A
            # heartbeat that beats its node's registration is lost; the node's clock
            # starts at registration (``_on_view_change``).
            self.unknown_dropped += 1
            return Verdict.UNKNOWN_NODE
        beat = self.beats.get(node_id)
        verdict = judge(beat, view.boot_id, hb.boot_id, hb.seq)
        if verdict is Verdict.REPLAY:
            self.replays_dropped += 1
            return verdict
        if verdict is Verdict.UNANNOUNCED_BOOT:
            self.unannounced_dropped += 1
            self._unannounced[node_id] = (hb, observed)
            return verdict
        self.accepted += 1
        if beat is None:
            beat = NodeBeat(last_seen=observed, boot_id=hb.boot_id, seq=hb.seq)
            self.beats[node_id] = beat
        else:
            beat.last_seen = max(beat.last_seen, observed)
            if hb.boot_id != beat.boot_id:
                if beat.boot_id:
                    beat.recent_boots = [beat.boot_id, *beat.recent_boots][:MAX_RECENT_BOOTS]
                beat.boot_id = hb.boot_id
            beat.seq = hb.seq
        beat.sent_at = hb.sent_at
        # While the agent reattaches its workloads its count is not yet known: a
        # draining node must not look empty (DRAINED) because of it.
        beat.running_allocs = None if hb.reattaching else hb.running_allocs
        beat.reattaching = hb.reattaching
        beat.gpu_count = hb.gpu_count
        if hb.fingerprint:
            beat.fingerprint = hb.fingerprint
        pending = self._unannounced.get(node_id)
        if pending is not None and not is_newer(beat, pending[0].boot_id, pending[0].seq):
            del self._unannounced[node_id]   # of this boot or an older one: stale
        if (view.lifecycle is Lifecycle.DEGRADED or view.intent is Intent.DRAINING
                or (view.lifecycle is Lifecycle.DOWN
                    and self.config.lifecycle.recover_down_on_heartbeat)):
            self._push(self.clock(), node_id)
        elif node_id not in self._armed:
            self._arm(node_id)
        return verdict

    def heartbeat_age(self, node_id: str) -> float | None:
        beat = self.beats.get(node_id)
        if beat is None or beat.boot_id == "":
            return None
        return max(0.0, self.clock() - beat.last_seen)

    # deadlines --------------------------------------------------------------
    def _on_view_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
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
        if view is None:
            self._forget(node_id)
            return
        if node_id not in self.beats:
            # Registered but never heartbeated: the clock starts at registration.
            self.beats[node_id] = NodeBeat(last_seen=self.clock(), boot_id="", seq=0)
        pending = self._unannounced.get(node_id)
        if pending is not None and pending[0].boot_id == view.boot_id:
            # Its boot's announcement was folded after it: it counts now.
            del self._unannounced[node_id]
            self.accept(*pending)
        self._push(self.clock(), node_id)

    def _forget(self, node_id: str) -> None:
        """The node left the view (deleted): nothing of it is kept."""
        for per_node in (self.beats, self._unannounced, self._armed, self._inflight,
                         self._append_backoff):
            per_node.pop(node_id, None)

    def _arm(self, node_id: str, after: float = -math.inf) -> None:
        """Push the node's next deadline, later than ``after``: a deadline computed as
        ``last_seen + timeout`` can round to ``now`` while ``now - last_seen`` rounds to
        just under ``timeout``, and re-arming at it would spin one sweep forever."""
        view = self.projector.nodes.get(node_id)
        if view is None:
            return
        beat = self.beats.get(node_id)
        if beat is None:
            beat = self.beats[node_id] = NodeBeat(last_seen=self.clock(), boot_id="", seq=0)
        deadline = liveness.next_deadline(view, self._silent_since(node_id, beat),
                                          self.timeouts(view), self._booting_since.get(node_id))
        if deadline is not None:
            self._push(max(deadline, math.nextafter(after, math.inf)), node_id)

    def _silent_since(self, node_id: str, beat: NodeBeat) -> float:
        """Since when the node counts as silent: its last heartbeat, when it became READY
        or when this process began observing (``reobserve``), whichever is last."""
        return max(beat.last_seen, self._ready_since.get(node_id, beat.last_seen),
                   self._observing_since)

    def _push(self, deadline: float, node_id: str) -> None:
        armed = self._armed.get(node_id)
        if armed is not None and armed <= deadline:
            return
        self._armed[node_id] = deadline
        heapq.heappush(self._heap, (deadline, node_id))

    async def _loop(self) -> None:
        interval = float(self.config.lifecycle.sweep_interval)
        asleep_since = self.clock()
        while True:
            await asyncio.sleep(interval)
            try:
                self.wake(asleep_since, interval)
            except Exception as err:
                self._log_sweep_error("sweep failed", err)
            asleep_since = self.clock()

    # observation ------------------------------------------------------------
    def shortest_timeout(self) -> float:
        lifecycle = self.config.lifecycle
        return float(min(lifecycle.heartbeat_timeout, lifecycle.heartbeat_timeout_sensitive))

    def jump_threshold(self) -> float:
        """How much later than expected the loop may wake before this process counts as
        having been away. Half the shortest heartbeat timeout: an agent beats at least
        twice per timeout, so a shorter absence cannot hide the beat that was due; never
        under ``JUMP_FLOOR``, so an ordinary stall of a busy event loop is not one."""
        return max(JUMP_FLOOR, self.shortest_timeout() / 2)

    def wake(self, asleep_since: float, interval: float) -> None:
        """One turn of the loop, which went to sleep for ``interval`` at ``asleep_since``:
        re-observe if this process was away meanwhile, then sweep. Nothing is declared
        while the NATS connection is down: heartbeats do not reach this process then."""
        now = self.clock()
        if self.nc is not None and not self.nc.is_connected:
            self._disconnected = True
            return
        if self._disconnected:
            self._disconnected = False
            self.reobserve(now, "the connection to NATS is back")
        away = now - asleep_since - interval
        if away > self.jump_threshold():
            self.reobserve(now, f"this process woke {away:.1f}s late (stopped, suspended "
                                "or starved)")
        self.sweep()

    def reobserve(self, now: float, why: str) -> None:
        """Count every node as last seen ``now``: what was not seen while this process
        could not look is no evidence (DESIGN §9). Entries already in the heap pop
        early, find nothing due and re-arm at the later deadline; a boot timeout is
        likewise not declared before ``now`` + one heartbeat timeout."""
        self._observing_since = max(self._observing_since, now)
        self.reobservations += 1
        for node_id, since in self._booting_since.items():
            view = self.projector.nodes.get(node_id)
            if view is not None:
                t = self.timeouts(view)
                self._booting_since[node_id] = max(
                    since, now + t.heartbeat_timeout - t.boot_timeout)
        log.warning("%s: observing every node for one heartbeat timeout before declaring "
                    "any DEGRADED or DOWN", why)

    def sweep(self) -> None:
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, node_id = heapq.heappop(heap)
            if self._armed.get(node_id) != deadline:
                continue  # superseded by an earlier entry
            del self._armed[node_id]
            try:
                self._evaluate(node_id, now)
            except Exception as err:
                self._log_sweep_error(f"evaluating {printable(node_id)} failed", err)
                self._push(now + APPEND_RETRY_MAX, node_id)

    def _log_sweep_error(self, what: str, err: Exception) -> None:
        """At most a line a minute (the sweep runs every sweep_interval), and a bounded
        one: an error may quote whatever a node id holds."""
        if self.clock() - self._sweep_error_logged >= 60.0:
            self._sweep_error_logged = self.clock()
            log.error("%s: %s (such errors are logged at most once a minute)", what,
                      printable(f"{type(err).__name__}: {err}"))

    def _evaluate(self, node_id: str, now: float) -> None:
        view = self.projector.nodes.get(node_id)
        if view is None:
            return
        backoff = self._append_backoff.get(node_id)
        if backoff is not None and now < backoff[1]:
            self._push(backoff[1], node_id)      # its last append failed: not before then
            return
        sent = self._inflight.get(node_id)
        if sent is not None:
            if now - sent < 5.0:
                self._push(now + 0.2, node_id)   # our last append is not folded yet
                return
            del self._inflight[node_id]
        beat = self.beats.get(node_id)
        if beat is None:
            self._arm(node_id, after=now)
            return
        booting_since = self._booting_since.get(node_id)
        seen = liveness.Observation(
            heartbeat_age=now - beat.last_seen, boot_id=beat.boot_id,
            running_allocs=beat.running_allocs,
            booting_for=None if booting_since is None else now - booting_since,
            silent_for=now - self._silent_since(node_id, beat))
        events = liveness.decide(view, seen, self.timeouts(view),
                                 self.config.lifecycle.recover_down_on_heartbeat,
                                 drained_by_heartbeat=not has_drain_status(self.config.notifier))
        if events:
            self._inflight[node_id] = now
            self._spawn(self._append(node_id, view, events))
        else:
            self._arm(node_id, after=now)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _append(self, node_id: str, view: NodeView, events: list[NodeEvent]) -> None:
        """Append one decision. A conflict is decided again at once (from the newer view);
        any other failure is retried after a delay that doubles per failure of that node
        (``APPEND_RETRY_FIRST`` .. ``APPEND_RETRY_MAX``), logged on the first only."""
        retry_in = 0.0
        try:
            version = await self.store.append_decided(events, view.version)
        except ConflictError:
            log.debug("%s: another writer moved first; deciding again", printable(node_id))
        except Exception as err:
            backoff = self._append_backoff.get(node_id)
            if backoff is None:
                log.error("liveness append for %s failed: %s; retrying with backoff (up to "
                          "%gs), logged again once it succeeds", printable(node_id),
                          printable(f"{type(err).__name__}: {err}"), APPEND_RETRY_MAX)
            retry_in = (APPEND_RETRY_FIRST if backoff is None
                        else min(backoff[0] * 2, APPEND_RETRY_MAX))
            self._append_backoff[node_id] = (retry_in, self.clock() + retry_in)
        else:
            self.detections += len(events)
            if self._append_backoff.pop(node_id, None) is not None:
                log.info("liveness append for %s succeeded again", printable(node_id))
            try:
                await self.projector.wait_applied(version, timeout=5.0)
            except Exception as err:  # noqa: BLE001 - decided again from the view as it is
                log.debug("%s: the view has not folded %d yet (%s)", printable(node_id), version,
                          type(err).__name__)
        finally:
            self._inflight.pop(node_id, None)
            if node_id in self.projector.nodes:
                self._push(self.clock() + retry_in, node_id)
