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
  once. A standard node held against no fingerprint (no expected one, no majority) is
  not recorded at all: there is nothing to audit.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.events.alloc import LIVE
from herdbook.events.breaker_events import HeldAction
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
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker_deciders import Gate, Holds, gate_at
from herdbook.reactors.decide_runner import Context, DecideRunner, Decision

log = logging.getLogger(__name__)

ACTOR = "sensitive"


@dataclass(frozen=True)
class Expectation:
    """What a node's fingerprint is held against: ``expected`` ("" for nothing) and how
    it was chosen."""

    expected: str
    how: str


def pool_expectations(views: Mapping[str, NodeView], fingerprints: Mapping[str, str],
                      expected_by_pool: Mapping[str, str | None]) -> dict[str, Expectation]:
    """Per compute node with a fingerprint: the pool's ``expected_fingerprint`` (config)
    or, without one, the pool's majority (more than half; a tie names no one)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for node_id, fp in fingerprints.items():
        view = views.get(node_id)
        if view is not None and view.type is NodeType.COMPUTE and fp:
            groups[view.info.labels.get("pool", "")].append(node_id)
    out: dict[str, Expectation] = {}
    for pool, members in sorted(groups.items()):
        expected = expected_by_pool.get(pool) if pool else None
        how = "the pool's expected fingerprint"
        if not expected:
            ranked = Counter(fingerprints[n] for n in members).most_common(2)
            majority = len(members) >= 3 and ranked[0][1] * 2 > len(members)
            expected = ranked[0][0] if majority else ""
            how = "the pool's majority"
        for node_id in sorted(members):
            out[node_id] = Expectation(expected, how)
    return out


def decide_node_conformance(view: NodeView, fingerprint: str, expectation: Expectation,
                            gate: Holds | None = None) -> list[NodeEvent]:
    """A changed fingerprint or drift verdict is recorded; a sensitive node that newly
    drifted is drained at once (caused by the record), unless the circuit breaker
    (``gate``) holds the drain."""
    expected = expectation.expected
    drift = bool(expected) and fingerprint != expected
    if (not expected and not view.drift and not view.fingerprint_expected
            and view.info.node_class is not NodeClass.SENSITIVE):
        return []   # a standard node held against nothing: nothing to audit
    unchanged = (fingerprint, expected, drift) == (view.fingerprint, view.fingerprint_expected,
                                                   view.drift)
    held = drift and view.held == HeldAction.DRAIN   # decided again once the breaker allows
    if unchanged and not held:
        return []
    reason = (f"fingerprint differs from {expectation.how}" if drift
              else "fingerprint conforms" if expected else "no expected fingerprint")
    record = NodeConformanceChanged(node_id=view.id, fingerprint=fingerprint,
                                    expected=expected, drift=drift, reason=reason, actor=ACTOR)
    events: list[NodeEvent] = [] if unchanged else [record]
    if (drift and (not view.drift or held) and view.info.node_class is NodeClass.SENSITIVE
            and view.intent in (Intent.ELIGIBLE, Intent.CORDONED)):
        instead = None if gate is None else gate(view, HeldAction.DRAIN,
                                                 "drain: conformance drift on a sensitive node")
        if instead is not None:
            return [*events, *instead]
        events.append(NodeDrainStarted(node_id=view.id, actor=ACTOR, urgent=False,
                                       reason="conformance drift on a sensitive node",
                                       causation_id=None if unchanged else record.event_id))
    return events


def decide_conformance(views: Mapping[str, NodeView], fingerprints: Mapping[str, str],
                       expected_by_pool: Mapping[str, str | None]) -> list[NodeEvent]:
    """The conformance events due across the fleet, node by node."""
    events: list[NodeEvent] = []
    for node_id, expectation in pool_expectations(views, fingerprints,
                                                  expected_by_pool).items():
        events += decide_node_conformance(views[node_id], fingerprints[node_id], expectation)
    return events


def decide_release(view: NodeView | None, running: int,
                   wipe_timeout: float) -> Decision[NodeEvent] | None:
    """After ``node.released`` (or the DRAINED that follows it): drain while ``running``
    other allocations run, else start the wipe."""
    if view is None or not view.release_pending or view.wipe_status == "wiping":
        return None
    if running and view.intent is not Intent.DRAINED:
        if view.intent is Intent.DRAINING:
            return None
        return Decision(view.version, [NodeDrainStarted(
            node_id=view.id, actor=ACTOR,
            reason=f"released: {running} other sensitive allocation(s) run")])
    return Decision(view.version, [NodeWipeStarted(
        node_id=view.id, actor=ACTOR, attempt=view.wipe_attempt + 1, timeout_s=wipe_timeout,
        reason="released: wiping")])


def decide_wipe_timeout(view: NodeView | None, attempt: int) -> Decision[NodeEvent] | None:
    """The wipe ``attempt`` was not confirmed in time: failed, unless it ended or another
    attempt began meanwhile."""
    if view is None or view.wipe_status != "wiping" or view.wipe_attempt != attempt:
        return None
    return Decision(view.version, [NodeWipeFailed(
        node_id=view.id, actor=ACTOR,
        reason=f"not confirmed within wipe_timeout {view.wipe_timeout_s:g}s")])


class SensitiveReactor:
    def __init__(self, projector: ProjectorRunner, config: Config,
                 fingerprints: Callable[[], Mapping[str, str]], *, clock: Clock,
                 runner: DecideRunner, gate: Gate | None = None) -> None:
        self.gate = gate
        self.runner = runner
        self.projector = projector
        self.config = config
        self.fingerprints = fingerprints
        self.clock = clock
        self._unsubscribe: Callable[[], None] | None = None
        self._queue: asyncio.Queue[tuple[str, str, int]] = asyncio.Queue()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._unsubscribe = self.projector.nodes.subscribe(self._on_node)
        self._tasks = [asyncio.create_task(self._work(), name="sensitive"),
                       asyncio.create_task(self._conformance_loop(), name="conformance")]
        loop = asyncio.get_running_loop()
        now = self.clock.now()
        for view in self.projector.nodes.values():   # wipes in flight across a restart
            if view.wipe_status == "wiping" and view.wipe_started_at is not None:
                left = view.wipe_timeout_s - (now - view.wipe_started_at).total_seconds()
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

    def _running(self, node_id: str) -> int:
        return sum(1 for a in self.projector.allocs.values()
                   if a.node_id == node_id and a.status in LIVE)

    async def after_release(self, node_id: str) -> None:
        """Drain while other allocations run, else wipe."""
        wipe_timeout = float(self.config.sensitive.wipe_timeout)
        await self.runner.run("node", node_id, lambda _: decide_release(
            self.projector.nodes.get(node_id), self._running(node_id), wipe_timeout))

    async def wipe_timed_out(self, node_id: str, attempt: int) -> None:
        self._timers.pop(node_id, None)
        done = await self.runner.run("node", node_id, lambda _: decide_wipe_timeout(
            self.projector.nodes.get(node_id), attempt))
        if done.events:
            log.error("%s: wipe attempt %d not confirmed in time: QUARANTINED", node_id,
                      attempt)

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
        """Record what changed; return how many events were appended. Each node is
        decided on its own (a node that changed meanwhile is decided again from its
        newer view against the same pool expectation)."""
        expected = {name: pool.expected_fingerprint for name, pool in self.config.pools.items()}
        fingerprints = self.fingerprints()
        done = 0
        for node_id, expectation in pool_expectations(self.projector.nodes, fingerprints,
                                                      expected).items():
            def decide(context: Context, node_id: str = node_id,
                       expectation: Expectation = expectation) -> Decision[NodeEvent] | None:
                view = self.projector.nodes.get(node_id)
                if view is None or view.lifecycle is Lifecycle.TERMINATED:
                    return None
                return Decision(view.version, decide_node_conformance(
                    view, fingerprints[node_id], expectation,
                    gate_at(self.gate, context.now)))

            done += len((await self.runner.run("node", node_id, decide)).events)
        return done
