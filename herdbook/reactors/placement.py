"""The scheduler's pure half: reconcile a job with its allocations, then bin-pack.

``reconcile`` says, slot by slot (a job of ``count`` N has slots 0..N-1), what must be
placed and what must be stopped. ``place`` puts the placements on nodes: feasible
nodes satisfy the constraints and have the capacity; among them the one that would be
fullest afterwards wins (bin-packing, Nomad's default), ties by node id.
No I/O here: the scheduler worker feeds it the view and appends what it returns.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from herdbook.events.alloc import AllocStatus
from herdbook.events.job_events import JobSpec, Resources
from herdbook.events.states import NodeClass, NodeType
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView


@dataclass(frozen=True)
class Slot:
    """One allocation to place: slot ``index``, replacing ``previous`` if set."""

    index: int
    requeue_count: int = 0
    previous: str | None = None
    reason: str = "new"


@dataclass(frozen=True)
class Stop:
    alloc: AllocView
    reason: str


@dataclass
class Reconciled:
    place: list[Slot] = field(default_factory=list)
    stop: list[Stop] = field(default_factory=list)


def _requeue(spec: JobSpec, alloc: AllocView) -> Slot | None:
    """A replacement for a failed or lost allocation, if its job's policy allows one."""
    policy, limit = spec.requeue.policy, spec.requeue.max_requeue
    if alloc.requeue_count >= limit:
        return None
    if alloc.status is AllocStatus.LOST:
        if not alloc.requeue_allowed or policy not in ("on_node_failure", "always"):
            return None
        return Slot(alloc.index, alloc.requeue_count + 1, alloc.id, "requeue: node lost")
    if alloc.status is AllocStatus.FAILED and policy == "always":
        return Slot(alloc.index, alloc.requeue_count + 1, alloc.id,
                    f"requeue: {alloc.status_reason or 'failed'}")
    return None


def reconcile(job: JobView, allocs: Iterable[AllocView]) -> Reconciled:
    out = Reconciled()
    by_slot: dict[int, list[AllocView]] = defaultdict(list)
    for alloc in allocs:
        by_slot[alloc.index].append(alloc)
    count = 0 if job.status == "dead" else job.spec.count
    for index in sorted(set(by_slot) | set(range(count))):
        if index not in by_slot:   # never placed (index < count): most slots of a new job
            out.place.append(Slot(index))
            continue
        history = sorted(by_slot[index], key=lambda a: a.version)
        wanted = [a for a in history if a.desired == "run" and not a.terminal]
        if index >= count:
            reason = "job stopped" if job.status == "dead" else "scaled down"
            out.stop += [Stop(a, reason) for a in wanted]
            continue
        if wanted:
            # keep the newest; a second one for the same slot is a leftover
            out.stop += [Stop(a, "duplicate in its slot") for a in wanted[:-1]]
            continue
        last = max(history, key=lambda a: (a.created_at is not None, a.created_at, a.version))
        if last.desired == "stop":
            # drained away (migrate: keeps its requeue count) or stopped and wanted again
            if last.migrate:
                out.place.append(Slot(index, last.requeue_count, last.id, "migrate: drain"))
            else:
                out.place.append(Slot(index, 0, last.id, "replaces a stopped allocation"))
        elif last.status in (AllocStatus.FAILED, AllocStatus.LOST):
            slot = _requeue(job.spec, last)
            if slot is not None:
                out.place.append(slot)
        # COMPLETE: the slot's work is done (jobs are batch work)
    return out


@dataclass
class Capacity:
    """What a node offers and what its live allocations (and this plan) already use."""

    node_id: str
    cpu: float
    memory_mb: int
    gpus: int
    labels: dict[str, str]
    node_class: str
    used_cpu: float = 0.0
    used_memory_mb: int = 0
    used_gpus: int = 0

    def fits(self, need: Resources) -> bool:
        return (self.used_gpus + need.gpus <= self.gpus
                and (self.cpu == 0 or self.used_cpu + need.cpu <= self.cpu + 1e-9)
                and (self.memory_mb == 0
                     or self.used_memory_mb + need.memory_mb <= self.memory_mb))

    def score(self, need: Resources) -> float:
        """How full the node would be: higher packs tighter (Nomad's binpack)."""
        parts = []
        if self.gpus:
            parts.append((self.used_gpus + need.gpus) / self.gpus)
        if self.cpu:
            parts.append((self.used_cpu + need.cpu) / self.cpu)
        if self.memory_mb:
            parts.append((self.used_memory_mb + need.memory_mb) / self.memory_mb)
        return sum(parts) / len(parts) if parts else 0.0

    def take(self, need: Resources) -> None:
        self.used_cpu += need.cpu
        self.used_memory_mb += need.memory_mb
        self.used_gpus += need.gpus


def capacities(nodes: Iterable[NodeView], allocs: Iterable[AllocView],
               validation_due: frozenset[str] = frozenset()) -> list[Capacity]:
    """The schedulable compute nodes with what their live allocations use. A node due for
    validation for one of ``validation_due`` (the gate's ``when``) is left out too: it is
    READY for the moment between its boot check and its ``node.validation_started``."""
    out: dict[str, Capacity] = {}
    for node in nodes:
        if node.type is not NodeType.COMPUTE or not node.schedulable:
            continue
        if node.validation_due and node.validation_due in validation_due:
            continue
        out[node.id] = Capacity(
            node_id=node.id, cpu=float(node.info.cpus),
            memory_mb=node.info.memory_bytes // 2**20, gpus=len(node.info.gpus),
            labels=dict(node.info.labels), node_class=str(node.info.node_class))
    for alloc in allocs:
        cap = out.get(alloc.node_id)
        if cap is not None and not alloc.terminal:
            cap.take(alloc.resources)
    return list(out.values())


def feasible(spec: JobSpec, cap: Capacity) -> bool:
    wanted_class = spec.constraints.node_class
    if wanted_class is not None and cap.node_class != wanted_class:
        return False
    if wanted_class is None and cap.node_class == NodeClass.SENSITIVE:
        return False   # sensitive nodes run only jobs that ask for them
    return all(cap.labels.get(k) == v for k, v in spec.constraints.labels.items())


@dataclass(frozen=True)
class Placement:
    slot: Slot
    node_id: str


def place(spec: JobSpec, slots: Sequence[Slot], caps: Sequence[Capacity],
          avoid: frozenset[str] = frozenset()) -> tuple[list[Placement], list[Slot]]:
    """Bin-pack ``slots`` onto ``caps`` (updated in place); return what was placed and
    what did not fit. ``avoid`` (the nodes being drained away from) is used last.

    A node's score depends only on its own usage, so a heap of the fitting nodes keyed
    by (not avoided, score after one more, smallest id) gives the best node in
    O(log nodes) per slot; only the chosen node is re-scored."""
    need = spec.resources
    heap = [_key(c, need, avoid) for c in caps if feasible(spec, c) and c.fits(need)]
    heapq.heapify(heap)
    by_id = {c.node_id: c for c in caps}
    placed: list[Placement] = []
    unplaced: list[Slot] = []
    for slot in slots:
        if not heap:
            unplaced.append(slot)
            continue
        best = by_id[heapq.heappop(heap)[-1]]
        best.take(need)
        placed.append(Placement(slot, best.node_id))
        if best.fits(need):
            heapq.heappush(heap, _key(best, need, avoid))
    return placed, unplaced


def _key(cap: Capacity, need: Resources, avoid: frozenset[str]) -> tuple[bool, float, str]:
    return (cap.node_id in avoid, -cap.score(need), cap.node_id)
