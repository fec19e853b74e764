"""The API's business rules as pure deciders: each takes the views it decides from, the
request's facts and the runner's ``Context``, and returns a ``Decision`` (the events and
the version they were decided from) or raises ``CommandRefused`` / ``ApiError``. No I/O:
``DecideRunner`` appends, retries on a conflict and waits for the view. Node intents and
membership decide in ``reactors.intents`` / ``reactors.membership``; the command table
(``api/commands.py``) wraps them. A command whose goal already holds raises
``AlreadyDone`` naming the state (a success, nothing appended), as the node verbs do."""

from __future__ import annotations

from msgspec.structs import replace

from herdbook.api.lookup import ApiError
from herdbook.config import PoolConfig
from herdbook.events.alloc import AllocRequeueApproved, AllocStatus
from herdbook.events.eval_events import EvalEvent
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec
from herdbook.events.node import NodeDeclared
from herdbook.events.pool import PoolScaled
from herdbook.events.states import NodeClass
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalRefused, EvalView, spawn, step
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Context, Decision
from herdbook.reactors.refused import AlreadyDone, CommandRefused


def decide_add_node(view: NodeView | None, version: int, node_id: str, *, actor: str,
                    reason: str, node_class: NodeClass, labels: dict[str, str],
                    context: Context) -> Decision[NodeDeclared]:
    """Declare a node that has never reported (UNKNOWN), Lattice's inventory.
    ``version``: the node aggregate's last sequence (a deleted node has events but no
    view)."""
    if view is not None:
        raise CommandRefused(f"node {node_id} already exists")
    return Decision(version, [NodeDeclared(node_id=node_id, actor=actor, reason=reason,
                                           node_class=node_class, labels=labels)])


def decide_register_job(job: JobView | None, spec: JobSpec, *, actor: str,
                        context: Context) -> Decision[JobRegistered]:
    """Register a job, or a new version of it (a stopped one runs again)."""
    return Decision(0 if job is None else job.version,
                    [JobRegistered(job_id=spec.id, spec=spec, actor=actor)])


def decide_stop_job(job: JobView | None, job_id: str, *, actor: str, reason: str,
                    context: Context) -> Decision[JobDeregistered]:
    """Deregister a job; a stopped one is ``AlreadyDone`` (``nomad job stop`` of a dead
    job changes nothing either)."""
    if job is None:
        raise ApiError("not_found", f"job {job_id} not found")
    if job.status == "dead":
        why = f", reason: {job.stop_reason}" if job.stop_reason else ""
        raise AlreadyDone(f"job {job_id} already stopped (status dead{why})")
    return Decision(job.version, [JobDeregistered(job_id=job_id, reason=reason, actor=actor)])


def decide_new_eval(eval_id: str, job_id: str, trigger: EvalTrigger, *, priority: int,
                    actor: str, node_id: str | None = None, cause: str | None = None,
                    context: Context) -> Decision[EvalEvent]:
    """The evaluation an operator's command asks for (job register or deregister, an
    approved requeue): a new eval aggregate, so expected version 0."""
    [created] = spawn(None, trigger, eval_id, job_id, priority=priority, node_id=node_id,
                      actor=actor)
    if cause is not None:
        created = replace(created, causation_id=cause)
    return Decision(0, [created])


QUEUED = frozenset({EvalStatus.PENDING, EvalStatus.DELAYED, EvalStatus.SCHEDULING,
                    EvalStatus.APPLYING})
"""An eval the broker holds or delivers: a retry's goal already holds."""


def decide_retry_eval(view: EvalView | None, eval_id: str, *, actor: str, reason: str,
                      context: Context) -> Decision[EvalEvent]:
    """failed -- retry --> scheduling: the broker delivers the eval again. One it already
    holds (a retry sent twice) is ``AlreadyDone``; a finished one is refused."""
    if view is None:
        raise ApiError("not_found", f"eval {eval_id} not found")
    if view.status in QUEUED:
        raise AlreadyDone(f"eval {view.id} already {view.status.value}: the broker "
                          "delivers it")
    try:
        event = step(view, Step.RETRY, reason or "retried by an operator", actor=actor)
    except EvalRefused as err:
        raise CommandRefused(f"{err} (only a failed eval can be retried)") from err
    return Decision(view.version, [event])


def decide_requeue_alloc(alloc: AllocView | None, alloc_id: str, job: JobView | None,
                         version: int, *, actor: str, reason: str,
                         context: Context) -> Decision[AllocRequeueApproved]:
    """An operator requeues an allocation lost on a sensitive node (never automatic).
    ``version``: the last sequence of the node's allocation aggregate."""
    if alloc is None:
        raise ApiError("not_found", f"allocation {alloc_id} not found")
    if alloc.status is not AllocStatus.LOST:
        raise CommandRefused(f"allocation {alloc.id} is {alloc.status.value}: only a lost "
                             "one is requeued")
    if job is None or job.status == "dead":
        raise CommandRefused(f"job {alloc.job_id} is stopped: nothing to requeue")
    if alloc.requeue_allowed:   # approved before, or lost on a node that is not sensitive
        policy = job.spec.requeue
        raise AlreadyDone(f"allocation {alloc.id} already allowed to requeue "
                          f"({alloc.status_reason or 'lost'}); its job's policy decides: "
                          f"{policy.policy}, at most {policy.max_requeue} times")
    return Decision(version, [AllocRequeueApproved(node_id=alloc.node_id, alloc_id=alloc.id,
                                                   reason=reason, actor=actor)])


def decide_scale_pool(pool: PoolConfig | None, name: str, size: int | None, *, actor: str,
                      reason: str, desired: int | None) -> PoolScaled:
    """A pool's target size, within its configured bounds. Not a decision on state: the
    last size written wins, so it is appended without an expected version. ``desired``:
    the size last written (None: never scaled); the same size again is ``AlreadyDone``."""
    if pool is None:
        raise ApiError("not_found", f"pool {name} not found")
    if size is None or not pool.min_nodes <= size <= pool.max_nodes:
        raise CommandRefused(f"pool {name} takes {pool.min_nodes} to {pool.max_nodes} nodes")
    if size == desired:
        raise AlreadyDone(f"pool {name} already scaled to {size}")
    return PoolScaled(pool=name, size=size, actor=actor, reason=reason)
