"""Sensitive nodes (Lattice): the release sequence, the wipe timeout, conformance drift.

- ``node.released``: if other allocations still run on the node it drains first;
  once nothing runs (or DRAINED) the wipe starts (``node.wipe_started``), which the
  node's agent carries out step by step.
- A wipe not confirmed within ``sensitive.wipe_timeout`` (or one whose step failed,
  reported by the agent) is ``node.wipe_failed``: QUARANTINED, scheduled as DOWN and
  never back in the pool by itself (``herd admin node wipe --force`` retries,
  ``herd node disable`` retires it).
- Conformance: every ``conformance_interval`` the fingerprints from the heartbeats are
  grouped by pool (label ``pool``); a node drifts when its fingerprint differs from the
  pool's ``expected_fingerprint`` (config) or, without one, from the pool's majority.
  A change is recorded as ``node.conformance_changed`` (an audit entry); a drifted
  standard node is flagged and scheduled last, a drifted sensitive node is drained at
  once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from herdbook.config import Config
from herdbook.events.alloc import LIVE
from herdbook.events.node import (
    NodeConformanceChanged,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeReleased,
    NodeWipeFailed,
    NodeWipeStarted,
)
from herdbook.events.states import Intent, Lifecycle, NodeClass, NodeType
from herdbook.events.store import ConflictError, EventStore
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner

log = logging.getLogger(__name__)

ACTOR = "sensitive"


def decide_conformance(views: Mapping[str, NodeView], fingerprints: Mapping[str, str],
                       expected_by_pool: Mapping[str, str | None]) -> list[NodeEvent]:
    """The conformance events due: a changed fingerprint or drift verdict is recorded;
    a sensitive node that newly drifted is drained at once (caused by the record)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for node_id, fp in fingerprints.items():
        view = views.get(node_id)
        if view is not None and view.type is NodeType.COMPUTE and fp:
            groups[view.info.labels.get("pool", "")].append(node_id)
    events: list[NodeEvent] = []
    for pool, members in sorted(groups.items()):
        expected = expected_by_pool.get(pool) if pool else None
        how = "the pool's expected fingerprint"
        if not expected:
            counts = Counter(fingerprints[n] for n in members)
            ranked = counts.most_common(2)
            # a majority needs more than half the pool: a tie names no one
            if len(members) < 3 or ranked[0][1] * 2 <= len(members):
                expected = ""
            else:
                expected = ranked[0][0]
            how = "the pool's majority"
        for node_id in sorted(members):
            view = views[node_id]
            fp = fingerprints[node_id]
            drift = bool(expected) and fp != expected
            if (fp, expected, drift) == (view.fingerprint, view.fingerprint_expected, view.drift):
                continue
            reason = (f"fingerprint differs from {how}" if drift
                      else "fingerprint conforms" if expected else "no expected fingerprint")
            record = NodeConformanceChanged(node_id=node_id, fingerprint=fp, expected=expected,
                                            drift=drift, reason=reason, actor=ACTOR)
            events.append(record)
            if (drift and not view.drift and view.info.node_class is NodeClass.SENSITIVE
                    and view.intent in (Intent.ELIGIBLE, Intent.CORDONED)):
                events.append(NodeDrainStarted(node_id=node_id, actor=ACTOR, urgent=False,
                                               reason="conformance drift on a sensitive node",
                                               causation_id=record.event_id))
    return events


class SensitiveReactor:
    def __init__(self, store: EventStore, projector: ProjectorRunner, config: Config,
                 fingerprints: Callable[[], Mapping[str, str]], *,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.store = store
        self._unsubscribe: Callable[[], None] | None = None
        self.projector = projector
        self.config = config
        self.fingerprints = fingerprints
        self.now = now
        self._queue: asyncio.Queue[tuple[str, str, int]] = asyncio.Queue()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._unsubscribe = self.projector.nodes.subscribe(self._on_node)
        self._tasks = [asyncio.create_task(self._work(), name="sensitive"),
                       asyncio.create_task(self._conformance_loop(), name="conformance")]
        loop = asyncio.get_running_loop()
        for view in self.projector.nodes.values():   # wipes in flight across a restart
            if view.wipe_status == "wiping" and view.wipe_started_at is not None:
                left = view.wipe_timeout_s - (self.now() - view.wipe_started_at).total_seconds()
                self._arm(loop, view.id, view.wipe_attempt, max(0.0, left))
            elif view.release_pending:
                self._queue.put_nowait(("released", view.id, 0))

    async def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_node(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        if isinstance(event, NodeReleased) or (isinstance(event, NodeDrained) and view is not None
                                               and view.release_pending):
            self._queue.put_nowait(("released", node_id, 0))
        elif isinstance(event, NodeWipeStarted):
            self._arm(asyncio.get_running_loop(), node_id, event.attempt, event.timeout_s)

    def _arm(self, loop: asyncio.AbstractEventLoop, node_id: str, attempt: int,
             delay: float) -> None:
        old = self._timers.pop(node_id, None)
        if old is not None:
            old.cancel()
        self._timers[node_id] = loop.call_later(
            delay, self._queue.put_nowait, ("wipe-timeout", node_id, attempt))

    async def _work(self) -> None:
        while True:
            kind, node_id, attempt = await self._queue.get()
            try:
                if kind == "released":
                    await self.after_release(node_id)
                elif kind == "wipe-timeout":
                    await self.wipe_timed_out(node_id, attempt)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sensitive reactor: %s %s failed; retrying in 1s", kind, node_id)
                await asyncio.sleep(1.0)
                self._queue.put_nowait((kind, node_id, attempt))

    async def _append(self, view: NodeView, *events: NodeEvent) -> None:
        try:
            await self.store.append_decided(list(events), view.version)
        except ConflictError:
            log.info("%s changed meanwhile; deciding again", view.id)
            await asyncio.sleep(0.2)
            raise

    async def after_release(self, node_id: str) -> None:
        """Drain while other allocations run, else wipe."""
        view = self.projector.nodes.get(node_id)
        if view is None or not view.release_pending or view.wipe_status == "wiping":
            return
        running = [a for a in self.projector.allocs.values()
                   if a.node_id == node_id and a.status in LIVE]
        if running and view.intent is not Intent.DRAINED:
            if view.intent is not Intent.DRAINING:
                await self._append(view, NodeDrainStarted(
                    node_id=node_id, actor=ACTOR,
                    reason=f"released: {len(running)} other sensitive allocation(s) run"))
            return
        await self._append(view, NodeWipeStarted(
            node_id=node_id, actor=ACTOR, attempt=view.wipe_attempt + 1,
            timeout_s=float(self.config.sensitive.wipe_timeout), reason="released: wiping"))

    async def wipe_timed_out(self, node_id: str, attempt: int) -> None:
        self._timers.pop(node_id, None)
        view = self.projector.nodes.get(node_id)
        if view is None or view.wipe_status != "wiping" or view.wipe_attempt != attempt:
            return
        limit = view.wipe_timeout_s
        log.error("%s: wipe not confirmed within %gs: QUARANTINED", node_id, limit)
        await self._append(view, NodeWipeFailed(
            node_id=node_id, actor=ACTOR, reason=f"not confirmed within wipe_timeout {limit:g}s"))

    async def _conformance_loop(self) -> None:
        while True:
            await asyncio.sleep(float(self.config.sensitive.conformance_interval))
            try:
                await self.check_conformance()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("conformance check failed")

    async def check_conformance(self) -> int:
        """Record what changed; return how many events were appended."""
        expected = {name: pool.expected_fingerprint for name, pool in self.config.pools.items()}
        views = self.projector.nodes
        events = decide_conformance(views, self.fingerprints(), expected)
        by_node: dict[str, list[NodeEvent]] = defaultdict(list)
        for event in events:
            by_node[event.node_id].append(event)
        done = 0
        for node_id, node_events in by_node.items():
            view = views.get(node_id)
            if view is None or view.lifecycle is Lifecycle.TERMINATED:
                continue
            try:
                await self.store.append_decided(node_events, view.version)
                done += len(node_events)
            except ConflictError:
                pass   # decided again next interval
        return done
