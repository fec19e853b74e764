"""The requests and replies of the scheduler's explanations (issue 31 item 2):
``eval.describe`` (an evaluation, what it placed and why the rest did not fit),
``job.plan`` (a dry run of the scheduler over the current view: no event is appended) and
``alloc.logs`` (a workload's output, read from its node's agent through the control
plane, bounded per reply)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from herdbook.api.envelope import _Reply
from herdbook.api.messages import EvalReply, Id
from herdbook.api.request_messages import _Request
from herdbook.events.agent_requests import LOGS_MAX_BYTES, LOGS_MAX_LINES
from herdbook.events.job_events import JobSpec


class EvalDescription(_Reply, frozen=True, kw_only=True):
    """``eval.describe``: the evaluation; ``placed``: the allocations it created;
    ``unplaced``: the job's slots that no node takes now (0 when nothing waits);
    ``placement``: while some wait, per constraint and resource why, in numbers and in
    ``reasons`` (``placement_why.explain``), from the current view of the fleet."""

    eval: EvalReply
    job_phase: str
    placed: int
    unplaced: int
    placement: dict[str, Any] | None = None


class PlanJob(_Request, frozen=True, kw_only=True):
    """``job.plan``: the spec `herd job run` would register."""

    spec: JobSpec


class PlannedAlloc(_Reply, frozen=True, kw_only=True):
    """One slot the plan would place: where, and whom it replaces (if anyone)."""

    index: int
    node_id: str
    reason: str
    previous_alloc: str | None = None


class PlannedStop(_Reply, frozen=True, kw_only=True):
    alloc_id: str
    index: int
    node_id: str
    reason: str


class JobPlan(_Reply, frozen=True, kw_only=True):
    """``job.plan``: what registering the spec would do now, scheduled by the scheduler's
    own code over the current view; ``unplaced`` slots and, if any, ``placement``: why.
    Nothing is appended: a later ``job run`` may place elsewhere if the fleet changed."""

    job_id: str
    version: int
    """The job version registering it would make (1 for a new job)."""
    place: list[PlannedAlloc]
    stop: list[PlannedStop]
    unplaced: int
    placement: dict[str, Any] | None = None


class AllocLogs(_Request, frozen=True, kw_only=True):
    """``alloc.logs``: a workload's output. Without ``offset``, its last ``tail`` lines;
    with one, what follows that byte offset (how ``-f`` polls). Either way at most
    ``max_bytes`` per reply."""

    id: Id
    offset: Annotated[int, Meta(ge=0)] | None = None
    tail: Annotated[int, Meta(ge=0, le=LOGS_MAX_LINES)] = 100
    max_bytes: Annotated[int, Meta(ge=1, le=LOGS_MAX_BYTES)] = LOGS_MAX_BYTES


class AllocLogsReply(_Reply, frozen=True, kw_only=True):
    """``data`` is the bytes ``[offset, next_offset)`` of the log (as UTF-8, invalid bytes
    replaced); ``size``: the log's size when read; ``truncated``: there is more before
    ``offset`` (a tail) or after ``next_offset`` (the reply's byte cap) than was sent."""

    alloc_id: str
    node_id: str
    data: str
    offset: int
    next_offset: int
    size: int
    truncated: bool
    running: bool
    """The allocation is pending, running or stopping: its log may still grow."""
