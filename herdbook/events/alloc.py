"""Allocation events: ``herd.alloc.<node_id>.<alloc_id>.<event_name>``.

The aggregate is the *node's* allocations (filter ``herd.alloc.<node_id>.>``), so a
plan that places on a node appends with optimistic concurrency against everything
that happened to that node's allocations, as DESIGN §6 asks.

Who writes what:
- the scheduler: ``alloc.placed``, ``alloc.stop_requested`` (job stop, scale down, drain
  migration, drain deadline);
- the control plane's allocation reactor: ``alloc.lost`` (node DOWN, disabled, deleted);
- the node's agent: ``alloc.running``, ``alloc.completed``, ``alloc.failed``,
  ``alloc.stopped``, ``alloc.lost`` (a workload found dead on reattach).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from herdbook.events.base import Event
from herdbook.events.job_events import Resources
from herdbook.events.subjects import validate_id


class AllocStatus(StrEnum):
    PENDING = "pending"        # placed, the agent has not started it yet
    RUNNING = "running"
    STOPPING = "stopping"      # a stop was requested, the workload still runs
    COMPLETE = "complete"      # exit code 0
    FAILED = "failed"          # exit code != 0, or it could not start
    STOPPED = "stopped"        # stopped on request (job stop, drain, scale down)
    LOST = "lost"              # its node went DOWN, or the workload vanished


VALIDATION_JOB = "node-validation"
"""The job id of a node validation's allocation: no job of that id is registered; the
validation reactor places it (``reactors/validation.py``)."""

TERMINAL = frozenset({AllocStatus.COMPLETE, AllocStatus.FAILED, AllocStatus.STOPPED,
                      AllocStatus.LOST})
LIVE = frozenset({AllocStatus.PENDING, AllocStatus.RUNNING, AllocStatus.STOPPING})


class AllocEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "alloc"

    node_id: str
    alloc_id: str

    @property
    def aggregate_id(self) -> str:
        return self.node_id

    @property
    def event_name(self) -> str:
        return f"{validate_id(self.alloc_id, 'alloc id')}.{super().event_name}"


class AllocPlaced(AllocEvent, frozen=True, kw_only=True, tag="alloc.placed"):
    job_id: str
    eval_id: str
    index: int
    """Which of the job's ``count`` slots this allocation fills."""
    command: list[str]
    resources: Resources = Resources()
    job_version: int = 1
    requeue_count: int = 0
    previous_alloc: str | None = None
    """The allocation this one replaces (requeue or migration)."""


class AllocRunning(AllocEvent, frozen=True, kw_only=True, tag="alloc.running"):
    pid: int
    reattached: bool = False


class AllocCompleted(AllocEvent, frozen=True, kw_only=True, tag="alloc.completed"):
    exit_code: int = 0
    output: str = ""
    """The tail of the workload's output, kept for a node validation only (its job
    ``node-validation``): the verdict's evidence (docs/remediation.md#validation)."""


class AllocFailed(AllocEvent, frozen=True, kw_only=True, tag="alloc.failed"):
    exit_code: int | None = None
    reason: str = ""
    output: str = ""
    """As ``alloc.completed``'s: a node validation's output tail."""


class AllocStopRequested(AllocEvent, frozen=True, kw_only=True, tag="alloc.stop_requested"):
    """Stop the workload: send ``signal``, wait ``grace_s``, then SIGTERM and after
    ``kill_timeout_s`` SIGKILL; ``force`` kills at once (drain deadline)."""

    reason: str = ""
    migrate: bool = False
    """A replacement is placed elsewhere (drain)."""
    signal: str = "SIGTERM"
    grace_s: float = 0.0
    kill_timeout_s: float = 30.0
    force: bool = False


class AllocStopped(AllocEvent, frozen=True, kw_only=True, tag="alloc.stopped"):
    exit_code: int | None = None


class AllocLost(AllocEvent, frozen=True, kw_only=True, tag="alloc.lost"):
    reason: str = ""
    requeue_allowed: bool = True
    """False on sensitive nodes: an operator requeues (``herd alloc requeue``)."""


class AllocRequeueApproved(AllocEvent, frozen=True, kw_only=True, tag="alloc.requeue_approved"):
    """An operator allows requeueing an allocation lost on a sensitive node
    (``herd alloc requeue``): Lattice's "Down → requeue: operator intervention"."""

    reason: str = ""
