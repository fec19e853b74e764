"""The allocation view and its pure fold.

Facts from the agent (running, completed, failed, stopped) are taken as they come, but
an allocation already LOST stays lost: its replacement runs elsewhere, and the agent
that reappears kills the workload when it reads the ``alloc.lost``.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec.structs import replace

from herdbook.events.alloc import (
    TERMINAL,
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocPlaced,
    AllocRequeueApproved,
    AllocRunning,
    AllocStatus,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.events.job_events import Resources


class AllocView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    job_id: str
    node_id: str
    eval_id: str
    index: int
    command: list[str]
    resources: Resources = Resources()
    status: AllocStatus = AllocStatus.PENDING
    desired: str = "run"                 # run | stop
    migrate: bool = False
    exit_code: int | None = None
    status_reason: str = ""
    requeue_count: int = 0
    requeue_allowed: bool = True
    previous_alloc: str | None = None
    job_version: int = 1
    pid: int | None = None
    reattached: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    modified_at: datetime | None = None
    output: str = ""
    """A node validation's output tail (``alloc.completed``/``alloc.failed``)."""
    version: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def apply_alloc(view: AllocView | None, event: AllocEvent, seq: int) -> AllocView | None:
    if isinstance(event, AllocPlaced):
        if view is not None:   # placed twice: the first placement stands
            return replace(view, version=seq)
        return AllocView(
            id=event.alloc_id, job_id=event.job_id, node_id=event.node_id,
            eval_id=event.eval_id, index=event.index, command=list(event.command),
            resources=event.resources, requeue_count=event.requeue_count,
            previous_alloc=event.previous_alloc, job_version=event.job_version,
            created_at=event.at, modified_at=event.at, version=seq)
    if view is None:
        return None
    view = replace(view, modified_at=event.at, version=seq)
    if isinstance(event, AllocRequeueApproved):
        return replace(view, requeue_allowed=True, status_reason=f"{view.status_reason}; "
                       f"requeue approved by {event.actor}")
    if view.status is AllocStatus.LOST and not isinstance(event, AllocStopRequested):
        return view
    match event:
        case AllocRunning(pid=pid, reattached=reattached):
            if view.terminal:
                return view
            status = AllocStatus.STOPPING if view.desired == "stop" else AllocStatus.RUNNING
            return replace(view, status=status, pid=pid, reattached=reattached,
                           started_at=view.started_at or event.at)
        case AllocStopRequested(reason=reason, migrate=migrate):
            if view.terminal:
                return replace(view, desired="stop", migrate=view.migrate or migrate)
            status = AllocStatus.STOPPING if view.status is AllocStatus.RUNNING else view.status
            return replace(view, desired="stop", migrate=view.migrate or migrate, status=status,
                           status_reason=reason)
        case AllocCompleted(exit_code=code, output=output):
            return _finish(view, AllocStatus.COMPLETE, code, "exit 0", event.at, output)
        case AllocFailed(exit_code=code, reason=reason, output=output):
            return _finish(view, AllocStatus.FAILED, code, reason or f"exit {code}", event.at,
                           output)
        case AllocStopped(exit_code=code):
            return _finish(view, AllocStatus.STOPPED, code, view.status_reason or "stopped",
                           event.at)
        case AllocLost(reason=reason, requeue_allowed=allowed):
            return replace(_finish(view, AllocStatus.LOST, None, reason, event.at),
                           requeue_allowed=allowed)
    return view


def _finish(view: AllocView, status: AllocStatus, code: int | None, reason: str,
            at: datetime, output: str = "") -> AllocView:
    if view.terminal:
        return view   # the first terminal fact wins; a late duplicate changes nothing
    return replace(view, status=status, exit_code=code, status_reason=reason, finished_at=at,
                   pid=None, output=output)
