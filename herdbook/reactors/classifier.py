"""The health classifier: reads HERD_HEALTH, classifies each report with the CEL policy,
and decides health changes (and DOWN on a fatal event) through the decide runner.

Its position in HERD_HEALTH commits with what it decides (pyeventsourcing's tracking
record): every ``node.health_changed`` carries the HERD_HEALTH sequence of the report it
was decided on (``report_seq``). On start the classifier reads each node's last health
change and resumes after the latest, so reports that arrived while the control plane
was down are classified when it comes back. A report at or before its node's last
decided one (a restart, another replica that decided first) changes nothing; reports
after it that decided nothing are classified again, which rebuilds the count of
consecutive unhealthy reports and appends nothing the view does not call for.

A report counts only if its subject vouches for it (``herd.health.<id>`` with a valid id
the body names, valid ids in the body: ``events.authority``); anything else, undecodable
bodies included, is dead-lettered to ``herd.deadletter.HERD_HEALTH`` and counted.
Reports of nodes not in the view keep no state.

Counter-like faults are held (``health.fault_hold``): each verdict's findings go into
``holds``, and the holds still in effect when a report is classified go with its
verdict to the decider, which keeps a DEGRADED node DEGRADED while one lasts. The holds
are rebuilt on start from the replayed reports, with the fault history; an operator's
uncordon or enable drops the node's holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.clock import Clock
from herdbook.events.authority import bind_event, bind_node_report, check_ids
from herdbook.events.breaker_events import HeldAction
from herdbook.events.codec import decode_health_report
from herdbook.events.deadletters import DeadLetters
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.hb_shards import shard_of
from herdbook.events.health_report import GpuVerdict, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeEnabled, NodeEvent, NodeUncordoned
from herdbook.events.states import Health
from herdbook.events.subjects import EVENTS_STREAM, HEALTH_STREAM, printable
from herdbook.health.fault_history import FaultHistory, serials_of
from herdbook.health.fault_hold import FaultHolds
from herdbook.health.policy import Policy, Verdict
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker_deciders import Gate, Holds, gate_at
from herdbook.reactors.decide_runner import Context, DecideRunner, Decision
from herdbook.reactors.gpu_health import kept_gpus, report_gpus
from herdbook.reactors.health import decide_health

log = logging.getLogger(__name__)

HEALTH_CHANGES = "herd.node.*.health_changed"
WAITING = 16
"""Reports kept per node while another replica classifies it (the newest)."""


def decide_on_report(view: NodeView | None, verdict: Verdict, report: HealthReport, seq: int,
                     unhealthy_in_a_row: int, threshold: int, decided_through: int,
                     gate: Holds | None = None, *, gpus: Mapping[int, GpuVerdict] | None = None,
                     ) -> tuple[Decision[NodeEvent] | None, int]:
    """The decision on report ``seq`` of a node whose last health change was decided on
    report ``decided_through``, and the new count of consecutive unhealthy reports. A
    report already decided on, or of a node not in the view, decides nothing. ``gate``:
    the circuit breaker (``reactors/breaker.py``), asked before the node turns UNHEALTHY.
    ``gpus``: the report's per-GPU verdicts (``gpu_health.report_gpus``)."""
    if view is None or seq <= decided_through:
        return None, unhealthy_in_a_row
    events, count = decide_health(view, verdict, unhealthy_in_a_row, threshold,
                                  report.report_id, seq, gpus=gpus)
    if gate is not None and any(isinstance(e, NodeHealthChanged) and e.health is Health.UNHEALTHY
                                for e in events):
        would = " and ".join("UNHEALTHY" if isinstance(e, NodeHealthChanged) else "DOWN"
                             for e in events)
        instead = gate(view, HeldAction.UNHEALTHY, f"{would}: {'; '.join(verdict.reasons)}")
        if instead is not None:
            # the node's change is held; what the GPUs' verdicts are is recorded all the same
            events = kept_gpus(view.gpus, view.health, view.id, events, instead)
    return Decision(view.version, events), count


async def decided_reports(nc: NATS, timeout: float = 120.0) -> dict[str, int]:
    """Per node, the report its last health change was decided on: the last
    ``node.health_changed`` of every node, read once from HERD_EVENTS."""
    decided: dict[str, int] = {}

    async def on_event(msg: Msg) -> None:
        try:
            event = bind_event(msg.subject, msg.data)
        except Exception:  # noqa: BLE001 - the projector dead-letters what it cannot read
            return
        if isinstance(event, NodeHealthChanged) and event.report_seq:
            decided[event.node_id] = event.report_seq

    feed = StreamFeed(nc, EVENTS_STREAM, HEALTH_CHANGES, 1, on_event, batch=2000,
                      last_per_subject=True)
    await feed.start()
    try:
        await asyncio.wait_for(feed.caught_up.wait(), timeout=timeout)
    finally:
        await feed.stop()
    return decided


class HealthClassifier:
    def __init__(self, nc: NATS, projector: ProjectorRunner, policy: Policy, threshold: int,
                 pool_thresholds: dict[str, int] | None = None, *, clock: Clock,
                 runner: DecideRunner, gate: Gate | None = None) -> None:
        self.nc = nc
        self.gate = gate
        """The circuit breaker's gate (``reactors/breaker.py``); None: none."""
        self.runner = runner
        self.projector = projector
        self.policy = policy
        self.threshold = threshold
        self.pool_thresholds = pool_thresholds or {}
        self.unhealthy_in_a_row: dict[str, int] = {}
        self.decided: dict[str, int] = {}
        """Per node, the HERD_HEALTH sequence of the report its last health change was
        decided on (by this replica or another)."""
        self.reports = 0
        self.dead_letters = DeadLetters(nc, HEALTH_STREAM, clock=clock.monotonic, logger=log)
        self._position = 0
        self._unsubscribe: Callable[[], None] | None = None
        self._feed: StreamFeed | None = None
        self.history = FaultHistory(clock)
        """Each node's recent faults, for the policy's ``history.*`` (``health.fault_history``);
        rebuilt on start from HERD_HEALTH's reports up to the position resumed from."""
        self.holds = FaultHolds()
        """Each node's held counter-like faults (``health.fault_hold``), rebuilt the same way."""
        self._replay_through = 0
        self.shards = 1
        self._held: set[int] | None = None
        """With liveness shards (S > 1), the shards whose nodes are classified here (``take``,
        ``release``: the shard leases); None: every node, on every replica."""
        self._shard_of: dict[str, int] = {}
        self._waiting: dict[str, deque[tuple[HealthReport, int, float | None]]] = {}
        """Reports that mattered (events, a check not healthy) of nodes whose shard this
        replica does not hold, kept for the day it takes it (their events are in the
        history already)."""

    def shard(self, shards: int) -> None:
        """Classify only the nodes of the shards taken here (issue 32 item 1: the
        classifier shards by node with liveness, ``control/shards.py``)."""
        self.shards, self._held = shards, set()

    def _classifies(self, node_id: str) -> bool:
        if self._held is None:
            return True
        shard = self._shard_of.get(node_id)
        if shard is None:
            shard = self._shard_of[node_id] = shard_of(node_id, self.shards)
        return shard in self._held

    async def take(self, shard: int) -> None:
        """Classify this shard's nodes from now on, starting with the reports that
        mattered while another replica held it (a report its holder decided on changes
        nothing: ``decided``)."""
        if self._held is None or shard in self._held:
            return
        self._held.add(shard)
        for node_id in [n for n in self._waiting if self._classifies(n)]:
            for report, seq, at in self._waiting.pop(node_id):
                try:
                    await self.classify(report, seq, at, recorded=True)
                except Exception as err:  # noqa: BLE001 - the next report decides again
                    log.error("classifying report %d of %s failed: %s", seq,
                              printable(node_id), printable(f"{type(err).__name__}: {err}"))

    async def release(self, shard: int) -> None:
        if self._held is not None:
            self._held.discard(shard)

    def _keep(self, report: HealthReport, seq: int, at: float | None) -> None:
        """A report of a node another replica classifies: its events into the history
        and the holds, as every replica keeps them; kept if it matters, for a takeover.
        A healthy report is not kept: the node's next one says the same."""
        if not report.events and all(c.status == "healthy" for c in report.checks):
            return
        self._replay(report, at or 0.0)
        self._waiting.setdefault(report.node_id, deque(maxlen=WAITING)).append(
            (report, seq, at))

    async def start(self) -> None:
        self.follow(await decided_reports(self.nc))
        self._replay_through = self._position   # before it: the fault history only
        self._feed = StreamFeed(self.nc, HEALTH_STREAM, "herd.health.*", 1,
                                self._on_report, batch=500)
        await self._feed.start()

    def follow(self, decided: dict[str, int]) -> None:
        """Resume after the reports already decided on (``decided_reports``), and follow
        the view from now on."""
        self.decided = dict(decided)
        self._position = max(self.decided.values(), default=0)
        self._unsubscribe = self.projector.nodes.subscribe(self._on_view_change)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._feed is not None:
            await self._feed.stop()

    @property
    def deadlettered(self) -> int:
        return self.dead_letters.count

    def _on_view_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        if view is None:
            self.unhealthy_in_a_row.pop(node_id, None)
            self.decided.pop(node_id, None)
            self.holds.clear(node_id)
            self._waiting.pop(node_id, None)
            self._shard_of.pop(node_id, None)
            return
        if isinstance(event, NodeUncordoned | NodeEnabled):
            self.holds.clear(node_id)   # the operator checked the node: its holds end now
        if isinstance(event, NodeHealthChanged) and event.report_seq:
            self.decided[node_id] = max(self.decided.get(node_id, 0), event.report_seq)
        # An operator cleared UNHEALTHY (uncordon/enable): counting starts again.
        if view.health is Health.UNKNOWN:
            self.unhealthy_in_a_row.pop(node_id, None)

    async def _on_report(self, msg: Msg) -> None:
        seq = stream_seq(msg)
        try:
            report = decode_health_report(msg.data)
            bind_node_report(msg.subject, report.node_id)
            check_ids(report)
        except Exception as err:  # noqa: BLE001 - any garbage, RecursionError included
            await self.dead_letters.send(msg, f"{type(err).__name__}: {err}")
            self._position = seq
            return
        at = _stored_at(msg)
        if seq <= self._replay_through:
            self._replay(report, at or 0.0)
            self._position = seq
            return
        if not self._classifies(report.node_id):
            self._keep(report, seq, at)
            self._position = seq
            return
        self.reports += 1
        try:
            await self.classify(report, seq, at)
        except Exception as err:  # noqa: BLE001 - the next report decides again
            log.error("classifying report %d of %s failed: %s", seq, printable(report.node_id),
                      printable(f"{type(err).__name__}: {err}"))
        self._position = seq

    def _replay(self, report: HealthReport, at: float) -> None:
        """A report decided on already: into the fault history and the holds."""
        verdict = self.policy.replay(self.history, report, self._serials(report.node_id), at)
        if verdict is not None:
            self.holds.record(report.node_id, verdict.findings, at)

    def _serials(self, node_id: str) -> dict[int, str]:
        view = self.projector.nodes.get(node_id)
        return {} if view is None else serials_of(view.info.gpus)

    async def classify(self, report: HealthReport, seq: int, at: float | None = None, *,
                       recorded: bool = False) -> None:
        """Decide on report ``seq`` (its HERD_HEALTH sequence) from the node's current
        view; after a conflict, again from the newer one. ``recorded``: its events are in
        the history already (kept while another replica held the node's shard)."""
        node_id = report.node_id
        if node_id not in self.projector.nodes:
            return
        if seq <= self.decided.get(node_id, 0):   # decided already: history and holds only
            if not recorded:
                self._replay(report, self.history.when(at))
            return
        when = self.history.when(at)
        serials = self._serials(node_id)
        verdict = (self.policy.classify(report, self.history.of(node_id, serials, when))
                   if recorded else self.policy.classify_with(self.history, report, serials,
                                                              when))
        self.holds.record(node_id, verdict.findings, when)
        settled = self.holds.settle(node_id, when)
        verdict = replace(verdict, held=tuple(h.reason for h in settled.active),
                          ended=tuple(h.reason for h in settled.ended), holding=settled.active)
        gpus = report_gpus(verdict, when)
        counted: list[int] = []

        def decide(context: Context) -> Decision[NodeEvent] | None:
            view = self.projector.nodes.get(node_id)
            threshold = self.threshold if view is None else self.pool_thresholds.get(
                view.info.labels.get("pool", ""), self.threshold)
            decision, count = decide_on_report(
                view, verdict, report, seq, self.unhealthy_in_a_row.get(node_id, 0), threshold,
                self.decided.get(node_id, 0), gate_at(self.gate, context.now), gpus=gpus)
            counted[:] = [count]
            return decision

        await self.runner.run("node", node_id, decide)
        if counted and node_id in self.projector.nodes:
            self.unhealthy_in_a_row[node_id] = counted[0]


def _stored_at(msg: Msg) -> float | None:
    """When HERD_HEALTH stored the report (the server's clock), if the message says."""
    try:
        return msg.metadata.timestamp.timestamp()
    except Exception:  # noqa: BLE001 - not a JetStream message: the clock's now
        return None
