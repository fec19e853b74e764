"""A scheduling pass's plan and how it is applied (Nomad's ``plan_apply.go``).

``make_plan`` reconciles the job with its allocations and bin-packs what must be placed
(``placement``), from one view of the cluster. ``node_plans`` splits it by node, each
with the version of the node's allocation aggregate that view held. ``apply_plan``
appends every node's part as one decision expecting that version: a node that moved
since the plan was made conflicts, and the whole plan is stale (``KeptChanging``; the
worker plans again).

Where the runner can (``DecideRunner.run_atomic``) and the plan holds ``ATOMIC_MIN``
events or more, whole nodes' parts are grouped into atomic batch publishes of up to
``PLAN_BATCH`` events (as even as whole nodes allow), batches side by side, one
acknowledgement each: every node's first message expects that node's version, and one
stale node refuses its whole batch (nothing of it stored); other batches are
unaffected. nats-server stages each atomic batch of a file stream (R1) in a file store
of its own, which costs more than the acknowledgements it saves below a few dozen
events, but a batch of hundreds beats one ack per event several times over
(benchmarks/placements.py). A smaller plan, or a store without atomic batches, goes one
decision per node, ``APPLY_CONCURRENCY`` nodes side by side, one acknowledged append per
event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from herdbook.events.alloc import AllocEvent, AllocPlaced, AllocStopRequested
from herdbook.events.batch import MAX_BATCH
from herdbook.events.states import Intent
from herdbook.projector.job_view import JobView
from herdbook.projector.tables import ReadModel
from herdbook.reactors.decide_runner import Appended, Context, DecideRunner, Decision
from herdbook.reactors.placement import Placement, Slot, Stop, capacities, place, reconcile

ACTOR = "scheduler"
APPLY_CONCURRENCY = 64
ATOMIC_MIN = 64
"""Events from which an atomic batch beats one ack per event. Measured on nats-server
2.15.1, 2 cores, 32 batches in flight against 64 nodes' appends side by side: 8 events
2.1–2.9k/s against 13–15k/s; 32: 5.8–11.7k/s; 128: 17–25k/s; 512: 31–37k/s."""
PLAN_BATCH = MAX_BATCH
"""Events per atomic batch of a plan (whole nodes' parts), as many as the server takes:
4,000 placements on 1,000 nodes as raw batches here went 29–36k/s in batches of 512,
38–47k/s in batches of 1,000. A stale node refuses its whole batch either way, and the
plan is made again either way."""


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


def make_plan(model: ReadModel, job: JobView,
              validation_due: frozenset[str] = frozenset()) -> Plan:
    allocs = model.allocs.values()
    wanted = reconcile(job, [a for a in allocs if a.job_id == job.id])
    caps = capacities(model.nodes.values(), allocs, validation_due)
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
    """Append every node's part through ``runner`` (its ids and clock; one attempt: a
    stale node makes the plan stale; no wait for the view); return the stream sequence
    of the last event appended (0 if none). A stale node is ``KeptChanging``, raised
    once every append is done."""
    if runner.atomic and sum(len(p.placed) + len(p.stops) for p in parts) >= ATOMIC_MIN:
        return await _apply_batched(runner, parts, eval_id, job, kill_timeout_s)
    return await _apply_by_node(runner, parts, eval_id, job, kill_timeout_s)


def plan_batches(parts: Sequence[NodePlan], size: int) -> list[list[NodePlan]]:
    """``parts`` in order, cut between nodes into batches of about ``size`` events each
    (as even as whole nodes allow; none above ``MAX_BATCH`` unless one node's part is,
    which the store then appends one event at a time)."""
    total = sum(len(p.placed) + len(p.stops) for p in parts)
    count = max(1, -(-total // size))
    target = min(-(-total // count), MAX_BATCH)
    out: list[list[NodePlan]] = []
    held = 0
    for part in parts:
        events = len(part.placed) + len(part.stops)
        if out and held < target and held + events <= MAX_BATCH:
            out[-1].append(part)
            held += events
        else:
            out.append([part])
            held = events
    return out


async def _apply_batched(runner: DecideRunner, parts: list[NodePlan], eval_id: str,
                         job: JobView, kill_timeout_s: float) -> int:
    """Each batch is one atomic decision of the runner, decided and sent before the next
    is built: the server commits one while the next is encoded (the connection writes a
    batch once this yields)."""
    what = f"plan of eval {eval_id}"

    def decide(batch: list[NodePlan], context: Context) -> list[Decision[AllocEvent]]:
        return [decide_node_plan(p, eval_id, job, kill_timeout_s, context) for p in batch]

    sends: list[asyncio.Task[Appended[AllocEvent]]] = []
    try:
        for batch in plan_batches(parts, PLAN_BATCH):
            sends.append(asyncio.create_task(runner.run_atomic(
                what, partial(decide, batch), wait=False, attempts=1)))
            await asyncio.sleep(0)
        results = await asyncio.gather(*sends, return_exceptions=True)
    except BaseException:
        for send in sends:
            send.cancel()
        await asyncio.gather(*sends, return_exceptions=True)
        raise
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return max((r.seq for r in results if isinstance(r, Appended)), default=0)


async def _apply_by_node(runner: DecideRunner, parts: list[NodePlan], eval_id: str,
                         job: JobView, kill_timeout_s: float) -> int:
    gate = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def on_node(part: NodePlan) -> int:
        async with gate:
            done = await runner.run("alloc", part.node_id, lambda context: decide_node_plan(
                part, eval_id, job, kill_timeout_s, context), wait=False, attempts=1)
            return done.seq

    results = await asyncio.gather(*(on_node(p) for p in parts), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return max((r for r in results if isinstance(r, int)), default=0)
