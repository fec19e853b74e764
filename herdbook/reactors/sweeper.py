"""The sweeper: declares liveness events (``reactors.liveness``) at their deadlines.

Here: when each node's silence began and when it is next due. Apart: the heartbeats in
(``reactors.heartbeat_intake``), the timers (``reactors.deadlines``) and the declarations,
decided and appended through the decide runner (``reactors.declarations``).

Observation before declaration (DESIGN §9): absence of evidence while this process could
not see heartbeats is no evidence. So when it starts, when its loop finds its own clock
jumped (the process was stopped, suspended or starved: it woke much later than it slept
for) and when its NATS connection comes back, every node counts as last seen then: a
node that heartbeats within one heartbeat timeout stays READY with no event, one that
does not is declared DEGRADED at that instant + its timeout and DOWN after its grace.

Per shard (DESIGN §10): with ``lifecycle.liveness_shards`` > 1 it sweeps only the nodes
of the shards this replica holds (``take``/``release``, from ``control.shards``); taking
a shard over begins observing that shard's nodes exactly as a start does. Two replicas
that briefly both sweep a shard cannot both declare a node: each declaration is appended
with the node's expected version, so the second conflicts, is decided again from the
newer view and comes to nothing (``reactors.declarations``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

from nats.aio.client import Client as NATS

from herdbook.clock import Clock
from herdbook.config import Config, grace_period, heartbeat_timeout
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeEnabled, NodeEvent, NodeWiped
from herdbook.events.states import Intent, Lifecycle
from herdbook.events.store import EventStore
from herdbook.events.subjects import printable
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors import liveness
from herdbook.reactors.deadlines import Deadlines
from herdbook.reactors.decide_runner import DecideRunner, Decision
from herdbook.reactors.declarations import APPEND_RETRY_MAX, Declarations
from herdbook.reactors.heartbeat_intake import HeartbeatIntake, check_mapping
from herdbook.reactors.heartbeats import Admission, NodeBeat
from herdbook.reactors.notifier import has_drain_status
from herdbook.reactors.seen_column import SeenColumn
from herdbook.reactors.sweeper_shards import ShardSweeping

log = logging.getLogger(__name__)

JUMP_FLOOR = 2.0
"""The loop waking this much later than it slept for (or half the shortest heartbeat
timeout, if longer) means this process was away: stopped, suspended or starved."""


class Sweeper(ShardSweeping):
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner,
                 config: Config, *, clock: Clock, runner: DecideRunner) -> None:
        self.nc = nc
        self.projector = projector
        self.config = config
        self.clock = clock
        self.shards = config.lifecycle.liveness_shards
        self.intake = HeartbeatIntake(nc, projector.nodes, clock, self._on_counted,
                                      shards=self.shards)
        self.deadlines = Deadlines()
        self.declarations = Declarations(runner, projector.nodes, projector, self.deadlines,
                                         clock, self._decide)
        self.taken: dict[int, float] = {}
        """Per shard swept here, when this replica took it (its observation began)."""
        self.shard_holders: Callable[[], dict[str, str]] = dict
        self.shards_taken = 0   # shards taken since start: more than held means churn
        """Every shard's holder (``control.shards.ShardLeases.status``; none unsharded)."""
        self.reobservations = 0   # clock jumps and reconnections seen since start
        self._unsubscribe: Callable[[], None] | None = None
        # Nothing counts as silence before this (``reobserve``): set at start.
        self._observing_since = -math.inf
        self._disconnected = False
        self._sweep_error_logged = -math.inf
        # When this process saw a node enter BOOTING (after a restart: when it started).
        self._booting_since: dict[str, float] = {}
        self._ready_since: dict[str, float] = {}     # node -> when it became READY
        self._task: asyncio.Task[None] | None = None

    def timeouts(self, view: NodeView) -> liveness.Timeouts:
        node_class = view.info.node_class
        return liveness.Timeouts(heartbeat_timeout(self.config, node_class),
                                 grace_period(self.config, node_class),
                                 float(self.config.lifecycle.boot_timeout))

    async def start(self) -> None:
        self._unsubscribe = self.projector.nodes.subscribe(self._on_view_change)
        if self.shards > 1:
            # MappingMissing: the composition root refuses the start with its message
            await check_mapping(self.nc, self.shards)
        await self.intake.start()
        if self.shards <= 1:
            self.begin_observing()
        self._task = asyncio.create_task(self._loop(), name="sweeper")

    def begin_observing(self) -> None:
        """Arm every node once the stored heartbeats are read. A node's silence starts no
        earlier than now: its last stored heartbeat may be old only because this control
        plane was down, so it is declared DEGRADED at the earliest one heartbeat timeout
        from now; a BOOTING node's boot timeout starts now."""
        now = self.clock.monotonic()
        self._observing_since = now
        self.taken[0] = now
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
        await self.intake.stop()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        await self.declarations.stop()

    # what the heartbeats tell (reactors.heartbeat_intake) ----------------------------
    def agent_conflict(self, view: NodeView) -> str | None:
        """Why two agents speak for this node now, or None (``AgentConflict``)."""
        return self.intake.agent_conflict(view.id, self.timeouts(view).heartbeat_timeout)

    def agent_conflicts(self) -> dict[str, str]:
        """Every node with two live agents now, and why."""
        out: dict[str, str] = {}
        for node_id in list(self.intake.conflicts):
            view = self.projector.nodes.get(node_id)
            if view is not None and (why := self.agent_conflict(view)) is not None:
                out[node_id] = why
        return out

    @property
    def beats(self) -> dict[str, NodeBeat]:
        return self.intake.beats

    @property
    def seen(self) -> SeenColumn:
        """The heartbeat times side by side (``/v1/fleet``'s ages)."""
        return self.intake.seen

    def accept(self, hb: Heartbeat, observed: float) -> Admission:
        return self.intake.accept(hb, observed)

    def heartbeat_age(self, node_id: str) -> float | None:
        return self.intake.heartbeat_age(node_id)

    @property
    def accepted(self) -> int:
        return self.intake.accepted

    @property
    def replays_dropped(self) -> int:
        return self.intake.replays_dropped

    @property
    def unknown_dropped(self) -> int:
        return self.intake.unknown_dropped

    @property
    def unannounced_dropped(self) -> int:
        return self.intake.unannounced_dropped

    @property
    def deadlettered(self) -> int:
        return self.intake.deadlettered

    @property
    def detections(self) -> int:
        return self.declarations.detections

    def stats(self) -> dict[str, int]:
        """The heartbeat counters since start, for status and metrics."""
        return {**self.intake.stats(), "liveness_reobservations": self.reobservations}

    def _on_counted(self, node_id: str, view: NodeView) -> None:
        """A heartbeat counted: a node it may move is decided at once, any other keeps its
        entry (lazy re-arming) or gets one."""
        if (view.lifecycle is Lifecycle.DEGRADED or view.intent is Intent.DRAINING
                or (view.lifecycle is Lifecycle.DOWN
                    and self.config.lifecycle.recover_down_on_heartbeat)):
            self.deadlines.push(self.clock.monotonic(), node_id)
        elif node_id not in self.deadlines:
            self._arm(node_id)

    # deadlines --------------------------------------------------------------
    def _on_view_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        now = self.clock.monotonic()
        if view is not None and view.lifecycle is Lifecycle.BOOTING:
            self._booting_since.setdefault(node_id, now)
        else:
            self._booting_since.pop(node_id, None)
        if view is None or view.lifecycle is not Lifecycle.READY:
            self._ready_since.pop(node_id, None)
        elif isinstance(event, NodeBootChecked | NodeWiped | NodeEnabled):
            # A node that just became READY (booted, wiped, enabled) gets a full heartbeat
            # timeout from now, not from the last heartbeat of its previous boot.
            self._ready_since[node_id] = now
        if view is None:
            self._forget(node_id)
            return
        if not self.intake.holds(node_id):
            return      # another replica sweeps it (its shard's lease)
        self.intake.known(node_id, view)
        self.deadlines.push(self.clock.monotonic(), node_id)

    def _forget(self, node_id: str) -> None:
        """The node left the view (deleted): nothing of it is kept."""
        self.intake.forget(node_id)
        self.deadlines.forget(node_id)
        self.declarations.forget(node_id)

    def _arm(self, node_id: str, after: float = -math.inf) -> None:
        """Push the node's next deadline, later than ``after``: a deadline computed as
        ``last_seen + timeout`` can round to ``now`` while ``now - last_seen`` rounds to
        just under ``timeout``, and re-arming at it would spin one sweep forever."""
        view = self.projector.nodes.get(node_id)
        if view is None or not self.intake.holds(node_id):
            return
        beat = self.beats.get(node_id)
        if beat is None:
            beat = self.beats[node_id] = NodeBeat(last_seen=self.clock.monotonic(),
                                                  boot_id="", seq=0)
        deadline = liveness.next_deadline(view, self._silent_since(node_id, beat),
                                          self.timeouts(view), self._booting_since.get(node_id))
        if deadline is not None:
            self.deadlines.push(max(deadline, math.nextafter(after, math.inf)), node_id)

    def _silent_since(self, node_id: str, beat: NodeBeat) -> float:
        """Since when the node counts as silent: its last heartbeat, when it became READY
        or when this process began observing (``reobserve``), whichever is last."""
        return max(beat.last_seen, self._ready_since.get(node_id, beat.last_seen),
                   self._observing_since,
                   self.taken.get(self.intake.shard(node_id), self._observing_since))

    async def _loop(self) -> None:
        interval = float(self.config.lifecycle.sweep_interval)
        asleep_since = self.clock.monotonic()
        while True:
            await asyncio.sleep(interval)
            try:
                self.wake(asleep_since, interval)
                self.agent_conflicts()   # logs a new one: two agents for one node
            except Exception as err:
                self._log_sweep_error("sweep failed", err)
            asleep_since = self.clock.monotonic()

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
        now = self.clock.monotonic()
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

    # declarations -----------------------------------------------------------
    def sweep(self) -> None:
        now = self.clock.monotonic()
        for node_id in self.deadlines.due(now):
            try:
                self._evaluate(node_id, now)
            except Exception as err:
                self._log_sweep_error(f"evaluating {printable(node_id)} failed", err)
                self.deadlines.push(now + APPEND_RETRY_MAX, node_id)

    def _log_sweep_error(self, what: str, err: Exception) -> None:
        """At most a line a minute (the sweep runs every sweep_interval), and a bounded
        one: an error may quote whatever a node id holds."""
        if self.clock.monotonic() - self._sweep_error_logged >= 60.0:
            self._sweep_error_logged = self.clock.monotonic()
            log.error("%s: %s (such errors are logged at most once a minute)", what,
                      printable(f"{type(err).__name__}: {err}"))

    def _observe(self, node_id: str, beat: NodeBeat, now: float) -> liveness.Observation:
        booting_since = self._booting_since.get(node_id)
        return liveness.Observation(
            heartbeat_age=now - beat.last_seen, boot_id=beat.boot_id,
            running_allocs=beat.running_allocs,
            booting_for=None if booting_since is None else now - booting_since,
            silent_for=now - self._silent_since(node_id, beat))

    def _decide(self, view: NodeView | None,
                seen: liveness.Observation) -> Decision[NodeEvent] | None:
        if view is None:
            return None
        return liveness.declaration(
            view, seen, self.timeouts(view), self.config.lifecycle.recover_down_on_heartbeat,
            drained_by_heartbeat=not has_drain_status(self.config.notifier))

    def _evaluate(self, node_id: str, now: float) -> None:
        view = self.projector.nodes.get(node_id)
        if view is None or not self.intake.holds(node_id):
            return
        not_before = self.declarations.not_before(node_id, now)
        if not_before is not None:
            self.deadlines.push(not_before, node_id)
            return
        beat = self.beats.get(node_id)
        if beat is None or not self.declarations.declare_due(
                node_id, view, self._observe(node_id, beat, now), now):
            self._arm(node_id, after=now)
