"""The API's replies about the work on the fleet: jobs, evaluations, allocations and
instances."""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from herdbook.api.envelope import _Reply
from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalStatus, EvalTrigger
from herdbook.events.job_events import Constraints, Requeue, Resources
from herdbook.events.states import NodeClass


class InstanceReply(_Reply, frozen=True, kw_only=True):
    id: str
    pool: str
    provider: str
    node_id: str
    state: str
    node_class: NodeClass = msgspec.field(name="class")
    provider_ref: str
    replaces: str | None
    reason: str
    errors: list[str]
    created_at: str | None
    state_at: str | None


class EvalReply(_Reply, frozen=True, kw_only=True):
    id: str
    job_id: str
    status: EvalStatus
    triggered_by: EvalTrigger
    previous_eval: str | None
    next_eval: str | None
    blocked_eval: str | None
    priority: int
    node_id: str | None
    wait_until: str | None
    status_reason: str
    created_at: str | None
    modified_at: str | None
    unchanged: str | UnsetType = UNSET
    """Only where ``eval.retry``'s goal already held (the broker holds the eval): the
    state, and nothing was appended. Absent from every other reply."""


class EvalChain(_Reply, frozen=True, kw_only=True):
    """``eval.status``: the eval, and its chain from the first PreviousEval forward."""

    eval: EvalReply
    chain: list[EvalReply]


class AllocReply(_Reply, frozen=True, kw_only=True):
    id: str
    job_id: str
    node_id: str
    index: int
    status: AllocStatus
    desired: str
    exit_code: int | None
    requeue_count: int
    requeue_allowed: bool
    previous_alloc: str | None
    migrate: bool
    eval_id: str
    pid: int | None
    reattached: bool
    status_reason: str
    resources: Resources
    command: list[str]
    job_version: int
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    modified_at: str | None


class RequeueResult(_Reply, frozen=True, kw_only=True):
    alloc: AllocReply
    eval_id: str
    unchanged: str | UnsetType = UNSET
    """Only where the allocation was already allowed to requeue: the state, and nothing
    was appended (``eval_id`` is empty). Absent otherwise."""


class JobReply(_Reply, frozen=True, kw_only=True):
    id: str
    status: str
    version: int
    count: int
    priority: int
    command: list[str]
    resources: Resources
    constraints: Constraints
    requeue: Requeue
    evals: list[EvalReply]
    stop_reason: str
    allocations: dict[str, int]
    phase: str = ""
    """What the job does now (``placement_why.PHASES``): a finished one is complete or
    dead, never running; ``status`` stays registered (running) or stopped (dead)."""
    placement: dict[str, Any] | None = None
    """While a slot waits to be placed: per constraint and resource, how many nodes
    ruled it out (``placement_why.explain``); None when nothing waits."""
    unchanged: str | UnsetType = UNSET
    """Only where ``job.stop``'s goal already held (the job was stopped): the state, and
    nothing was appended. Absent from every other reply."""


class JobSummary(_Reply, frozen=True, kw_only=True):
    """A job in ``job.list``: ``job.status`` without its spec's details and evaluations;
    ``allocations``: how many it has in each status."""

    id: str
    status: str
    version: int
    count: int
    priority: int
    allocations: dict[str, int]
    phase: str = ""
    """As ``JobReply.phase``."""


class RegisterResult(_Reply, frozen=True, kw_only=True):
    job: JobReply
    eval_id: str
