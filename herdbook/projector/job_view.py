"""The job view and its pure fold."""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec.structs import replace

from herdbook.events.job_events import JobDeregistered, JobEvent, JobRegistered, JobSpec


class JobView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    spec: JobSpec
    status: str = "running"     # running | dead (stopped)
    job_version: int = 1
    registered_at: datetime | None = None
    updated_at: datetime | None = None
    stop_reason: str = ""
    version: int = 0


def apply_job(view: JobView | None, event: JobEvent, seq: int) -> JobView | None:
    match event:
        case JobRegistered(spec=spec):
            job_version = 1 if view is None else view.job_version + 1
            return JobView(id=event.job_id, spec=spec, job_version=job_version,
                           registered_at=view.registered_at if view else event.at,
                           updated_at=event.at, version=seq)
        case JobDeregistered(reason=reason) if view is not None:
            return replace(view, status="dead", stop_reason=reason, updated_at=event.at,
                           version=seq)
    return view
