"""Why a job's allocations do not fit, and the job's phase: what the console's job page
and ``job.status`` say about a job (issue 28 item 5). Pure: read from the views.

``explain`` runs the scheduler's own tests (``placement.feasible``, ``Capacity.fits``)
over every compute node and counts, per constraint and per resource, the nodes each one
ruled out (Nomad's "constraint filtered N nodes", "resources exhausted"): a node is
counted once, under the first test it fails, in the order the scheduler applies them:
schedulable, class, labels, then resources (the first resource short). ``reasons`` says
the same in sentences, with the largest amount of the short resource any node that passed
the constraints has free ("99 GPUs asked; largest free: 8 on 20 nodes; 2 nodes filtered by
class=sensitive (not asked for)"): `herd job status`, `herd eval describe` and
`herd job plan` print them.

``phase``: what a job is doing now, from its allocations and evaluations, so a finished
batch job reads ``complete`` (or ``dead``), never ``running``:

- ``dead``: stopped (``job stop``), or finished with a slot that failed or was lost and
  will not be placed again;
- ``running``: an allocation is pending, running or stopping;
- ``blocked``: an evaluation waits for capacity (``blocked``) and nothing runs;
- ``pending``: an evaluation is being scheduled, or a slot still needs placing;
- ``complete``: every slot's last allocation exited 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from herdbook.events.alloc import LIVE, AllocStatus
from herdbook.events.evals import EvalStatus
from herdbook.events.job_events import Resources
from herdbook.events.states import Approval, NodeClass, NodeType
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.placement import Capacity, reconcile

PHASES = ("pending", "blocked", "running", "complete", "dead")
_SCHEDULING = frozenset({EvalStatus.PENDING, EvalStatus.SCHEDULING, EvalStatus.APPLYING,
                         EvalStatus.DELAYED})


def phase(job: JobView, allocs: list[AllocView], evals: Iterable[EvalView]) -> str:
    if job.status == "dead":
        return "dead"
    if any(a.status in LIVE for a in allocs):
        return "running"
    statuses = {e.status for e in evals}
    if EvalStatus.BLOCKED in statuses:
        return "blocked"
    if statuses & _SCHEDULING or reconcile(job, allocs).place:
        return "pending"
    last: dict[int, AllocView] = {}
    for alloc in sorted(allocs, key=lambda a: a.version):
        last[alloc.index] = alloc
    if len(last) >= job.spec.count and all(
            last[i].status is AllocStatus.COMPLETE for i in range(job.spec.count) if i in last):
        return "complete"
    return "dead"


def _node_reason(job: JobView, node: NodeView) -> str | None:
    """The first of the scheduler's constraints the node fails, or None."""
    if not node.schedulable:
        if node.approval is not Approval.APPROVED:
            return f"node {node.approval}"   # its state reads READY until approved
        return f"node {node.state}"
    wanted = job.spec.constraints.node_class
    node_class = str(node.info.node_class)
    if wanted is not None and node_class != wanted:
        return f"class={node_class} (wants {wanted})"
    if wanted is None and node_class == NodeClass.SENSITIVE:
        return "class=sensitive (not asked for)"
    for key, value in sorted(job.spec.constraints.labels.items()):
        if node.info.labels.get(key) != value:
            return f"label {key}={value}"
    return None


RESOURCES = ("gpus", "cpu", "memory_mb")
_UNIT = {"gpus": ("GPU", "GPUs"), "cpu": ("CPU", "CPUs"),
         "memory_mb": ("MB of memory", "MB of memory")}


def explain(job: JobView, nodes: Iterable[NodeView], allocs: Iterable[AllocView], *,
            planned: Mapping[str, int] | None = None, unplaced: int | None = None) \
        -> dict[str, Any]:
    """Per constraint (``filtered``: "node CORDONED", "class=cpu (wants gpu)", "label
    rack=r1") and per resource (``exhausted``: gpus, cpu, memory_mb) how many compute
    nodes each ruled out; ``fit``: the nodes with room for one more allocation;
    ``unplaced``: the slots still to place; ``largest_free``: per resource, the most any
    node that passed the constraints has free and on how many nodes; ``reasons``: all of
    it in sentences. ``planned``: allocations of this job a plan puts on a node (by node
    id) beside its live ones (`herd job plan`), and ``unplaced`` the plan's count."""
    need = job.spec.resources
    live_use: dict[str, list[Resources]] = {}
    all_allocs = list(allocs)
    for alloc in all_allocs:
        if not alloc.terminal:
            live_use.setdefault(alloc.node_id, []).append(alloc.resources)
    for node_id, count in (planned or {}).items():
        live_use.setdefault(node_id, []).extend([need] * count)
    filtered: Counter[str] = Counter()
    exhausted: Counter[str] = Counter()
    free: dict[str, Counter[float]] = {r: Counter() for r in RESOURCES}
    evaluated = fit = 0
    for node in nodes:
        if node.type is not NodeType.COMPUTE:
            continue
        evaluated += 1
        reason = _node_reason(job, node)
        if reason is not None:
            filtered[reason] += 1
            continue
        cap = Capacity(node_id=node.id, cpu=float(node.info.cpus),
                       memory_mb=node.info.memory_bytes // 2**20, gpus=len(node.info.gpus),
                       labels=dict(node.info.labels), node_class=str(node.info.node_class))
        for used in live_use.get(node.id, ()):
            cap.take(used)
        free["gpus"][cap.gpus - cap.used_gpus] += 1
        if cap.cpu:
            free["cpu"][round(cap.cpu - cap.used_cpu, 3)] += 1
        if cap.memory_mb:
            free["memory_mb"][cap.memory_mb - cap.used_memory_mb] += 1
        if cap.fits(need):
            fit += 1
            continue
        if cap.used_gpus + need.gpus > cap.gpus:
            exhausted["gpus"] += 1
        elif cap.cpu and cap.used_cpu + need.cpu > cap.cpu + 1e-9:
            exhausted["cpu"] += 1
        else:
            exhausted["memory_mb"] += 1
    if unplaced is None:
        unplaced = len(reconcile(job, [a for a in all_allocs if a.job_id == job.id]).place)
    largest = {r: {"free": _number(max(c)), "nodes": c[max(c)]}
               for r, c in free.items() if c}
    out = {"nodes_evaluated": evaluated, "fit": fit, "unplaced": unplaced,
           "filtered": dict(filtered.most_common()), "exhausted": dict(exhausted.most_common()),
           "needs": {"cpu": need.cpu, "memory_mb": need.memory_mb, "gpus": need.gpus},
           "largest_free": largest}
    out["reasons"] = reasons(out)
    return out


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _amount(resource: str, value: float) -> str:
    one, many = _UNIT[resource]
    return f"{_number(value)} {one if value == 1 else many}"


def _nodes(count: int) -> str:
    return f"{count} node{'' if count == 1 else 's'}"


def reasons(why: Mapping[str, Any]) -> list[str]:
    """``explain``'s result in sentences, the short resources first (Nomad's "Resources
    exhausted" and "Constraint ... filtered N nodes"), then the constraints."""
    if not why["nodes_evaluated"]:
        return ["no compute nodes"]
    out: list[str] = []
    for resource, count in why["exhausted"].items():
        line = f"{_amount(resource, why['needs'][resource])} asked"
        largest = why["largest_free"].get(resource)
        if largest is not None:
            line += f"; largest free: {_number(largest['free'])} on {_nodes(largest['nodes'])}"
        out.append(f"{line}; short on {_nodes(count)}")
    out += [f"{_nodes(count)} filtered by {reason}" for reason, count in why["filtered"].items()]
    if why["unplaced"] and why["fit"]:
        out.append(f"{_nodes(why['fit'])} now with room for one more")
    return out


def summary(why: Mapping[str, Any]) -> str:
    """One line: the sentences joined, as the example in issue 31 reads."""
    return "; ".join(why.get("reasons") or reasons(why))

