"""A scheduling pass's plan and how it is applied (Nomad's ``plan_apply.go``).

``make_plan`` reconciles the job with its allocations and bin-packs what must be placed
(``placement``), from one view of the cluster. ``node_plans`` splits it by node, each
with the version of the node's allocation aggregate that view held. ``apply_plan``
appends every node's part as one decision expecting that version, nodes side by side:
a node that moved since the plan was made conflicts, and the whole plan is stale
(``KeptChanging`` from a runner of one attempt; the worker plans again).

Where the store can (``EventStore.append_batch``), a node's part of ``ATOMIC_MIN`` events
or more goes as one atomic batch publish with one acknowledgement: a conflicting node's
part stores nothing, and the other nodes' parts are unaffected, as with one append per
event. A smaller part goes one acknowledged append per event: nats-server stages an
atomic batch of a file stream (R1) in a file store of its own, which costs more than
the acknowledgements it saves below a few dozen events (benchmarks/placements.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from herdbook.events.alloc import AllocEvent, AllocPlaced, AllocStopRequested
from herdbook.events.base import Event
from herdbook.events.states import Intent
from herdbook.projector.job_view import JobView
from herdbook.projector.tables import ReadModel
from herdbook.reactors.placement import Placement, Slot, Stop, capacities, place, reconcile
from herdbook.reactors.runner import Appends, Context, DecideRunner, Decision

ACTOR = "scheduler"
APPLY_CONCURRENCY = 64
ATOMIC_MIN = 64
"""Events of one node's part from which an atomic batch beats one ack per event. Measured
on nats-server 2.15.1, 2 cores, 32 batches in flight against 64 nodes' appends side by
side: 8 events 2.1–2.9k/s against 13–15k/s; 32: 5.8–11.7k/s; 128: 17–25k/s; 512: 31–37k/s."""


@runtime_checkable
class AppendsBatches(Protocol):
    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int: ...

    async def append_batch(self, events: Sequence[Event], expected_version: int) -> int: ...

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int: ...


@dataclass(frozen=True)
class AtomicDecisions:
    """A store whose ``append_decided`` sends a decision of ``ATOMIC_MIN`` events or more
    as one atomic batch."""

    store: AppendsBatches

    async def append_decided(self, events: Sequence[Event], expected_version: int) -> int:
        if len(events) >= ATOMIC_MIN:
            return await self.store.append_batch(events, expected_version)
        return await self.store.append_decided(events, expected_version)

    async def last_sequence(self, aggregate: str, aggregate_id: str) -> int:
        return await self.store.last_sequence(aggregate, aggregate_id)


def batching(runner: DecideRunner) -> DecideRunner:
    """``runner`` appending each decision as one atomic batch, if its store can."""
    if not isinstance(runner.store, AppendsBatches):
        return runner
    store: Appends = AtomicDecisions(runner.store)
    return DecideRunner(store, runner.reads, runner.clock, ids=runner.ids,
                        attempts=runner.attempts)


@dataclass(frozen=True)
class Plan:
    placed: list[Placement]
    unplaced: list[Slot]
    stops: list[Stop]


@dataclass
class NodePlan:
    """One node's part of a plan, and the version of its allocations it was made from."""

    node_id: str
    expected: int
    placed: list[Placement] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)


def make_plan(model: ReadModel, job: JobView) -> Plan:
    allocs = model.allocs.values()
    wanted = reconcile(job, [a for a in allocs if a.job_id == job.id])
    caps = capacities(model.nodes.values(), allocs)
    # draining nodes, and nodes whose conformance drifted, are used last
    draining = frozenset(n.id for n in model.nodes.values()
                         if n.intent is Intent.DRAINING or n.drift)
    placed, unplaced = place(job.spec, wanted.place, caps, draining)
    return Plan(placed, unplaced, wanted.stop)


def node_plans(plan: Plan, version_of: Callable[[str], int]) -> list[NodePlan]:
    """The plan by node (sorted by id), each expecting ``version_of(node_id)``."""
    by_node: dict[str, NodePlan] = {}

    def of(node_id: str) -> NodePlan:
        if node_id not in by_node:
            by_node[node_id] = NodePlan(node_id, version_of(node_id))
        return by_node[node_id]

    for p in plan.placed:
        of(p.node_id).placed.append(p)
    for s in plan.stops:
        of(s.alloc.node_id).stops.append(s)
    return [by_node[n] for n in sorted(by_node)]


def decide_node_plan(part: NodePlan, eval_id: str, job: JobView, kill_timeout_s: float,
                     context: Context) -> Decision[AllocEvent]:
    """The node's allocation events: a placement gets a new allocation id from the
    context; a stop names its reason."""
    events: list[AllocEvent] = [AllocPlaced(
        node_id=part.node_id, alloc_id=context.new_id()[:20], job_id=job.id,
        eval_id=eval_id, index=p.slot.index, command=list(job.spec.command),
        resources=job.spec.resources, job_version=job.job_version,
        requeue_count=p.slot.requeue_count, previous_alloc=p.slot.previous, actor=ACTOR,
        causation_id=eval_id) for p in part.placed]
    events += [AllocStopRequested(
        node_id=part.node_id, alloc_id=s.alloc.id, reason=s.reason,
        kill_timeout_s=kill_timeout_s, actor=ACTOR, causation_id=eval_id)
        for s in part.stops]
    return Decision(part.expected, events)


async def apply_plan(runner: DecideRunner, parts: list[NodePlan], eval_id: str,
                     job: JobView, kill_timeout_s: float) -> int:
    """Append every node's part (``runner``: one attempt, no wait); return the stream
    sequence of the last event appended (0 if none). The first node's failure is raised
    once every node's append is done."""
    gate = asyncio.Semaphore(APPLY_CONCURRENCY)
    runner = batching(runner)

    async def on_node(part: NodePlan) -> int:
        async with gate:
            done = await runner.run("alloc", part.node_id, lambda context: decide_node_plan(
                part, eval_id, job, kill_timeout_s, context), wait=False)
            return done.seq

    results = await asyncio.gather(*(on_node(p) for p in parts), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return max((r for r in results if isinstance(r, int)), default=0)
