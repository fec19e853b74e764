"""The scheduler explains itself (issue 31 item 2, as Nomad's does): ``eval.describe``,
``job.plan`` and ``alloc.logs``.

- ``eval.describe``: an evaluation, the allocations it placed, and while the job has
  slots no node takes, why (``placement_why.explain``: per constraint and resource, the
  largest free amount, in sentences), from the current view.
- ``job.plan``: a dry run. The spec as `herd job run` would register it, reconciled and
  bin-packed by the scheduler's own ``plan_apply.make_plan`` over the current view;
  nothing is appended. What would be placed where, stopped, and what would not fit, why.
- ``alloc.logs``: a workload's output, asked of the agent of the allocation's node on
  ``herd.agent.<node>.logs`` (``authority.AGENT_SERVED``: operators and the control plane
  only), one bounded piece per request (``agent/workload_logs.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from herdbook.api.explain_messages import (
    AllocLogs,
    AllocLogsReply,
    EvalDescription,
    JobPlan,
    PlanJob,
    PlannedAlloc,
    PlannedStop,
)
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import ById
from herdbook.api.present import eval_reply
from herdbook.config import Config
from herdbook.events.agent_requests import LogsRequest, logs_reply_decoder
from herdbook.events.alloc import LIVE
from herdbook.events.job_events import check_job_spec
from herdbook.events.subjects import logs_subject
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.job_view import JobView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.placement_why import explain, phase
from herdbook.reactors.plan_apply import make_plan

Handler = Callable[[bytes], Awaitable[Any]]
LOGS_TIMEOUT_S = 5.0
"""How long the control plane waits for an agent's piece of a log."""


def validation_due(config: Config) -> frozenset[str]:
    """The validation triggers whose due nodes take no work, as the scheduler reads them."""
    return frozenset(config.validation.when) if config.validation.enabled else frozenset()


class ExplainRoutes:
    def __init__(self, nc: NATS, projector: ProjectorRunner, config: Config) -> None:
        self.nc = nc
        self.projector = projector
        self.validation_due = validation_due(config)

    def routes(self) -> dict[str, Handler]:
        return {"eval.describe": self.eval_describe, "job.plan": self.job_plan,
                "alloc.logs": self.alloc_logs}

    async def eval_describe(self, data: bytes) -> EvalDescription:
        view: EvalView = resolve(self.projector.evals, decode(data, ById).id, "eval")
        placed = sum(1 for a in self.projector.allocs.values() if a.eval_id == view.id)
        job = self.projector.jobs.get(view.job_id)
        if job is None:
            return EvalDescription(eval=eval_reply(view), job_phase="", placed=placed,
                                   unplaced=0)
        allocs = [a for a in self.projector.allocs.values() if a.job_id == job.id]
        now = phase(job, allocs, (e for e in self.projector.evals.values()
                                  if e.job_id == job.id))
        why = explain(job, self.projector.nodes.values(), self.projector.allocs.values())
        waiting = why["unplaced"] if now in ("pending", "blocked") else 0
        return EvalDescription(eval=eval_reply(view), job_phase=now, placed=placed,
                               unplaced=waiting, placement=why if waiting else None)

    async def job_plan(self, data: bytes) -> JobPlan:
        spec = check_job_spec(decode(data, PlanJob).spec, "job")
        old = self.projector.jobs.get(spec.id)
        job = JobView(id=spec.id, spec=spec, job_version=old.job_version + 1 if old else 1)
        plan = make_plan(self.projector.model, job, self.validation_due)
        why = None
        if plan.unplaced:
            on_node = Counter(p.node_id for p in plan.placed)
            why = explain(job, self.projector.nodes.values(), self.projector.allocs.values(),
                          planned=on_node, unplaced=len(plan.unplaced))
        return JobPlan(
            job_id=spec.id, version=job.job_version,
            place=[PlannedAlloc(index=p.slot.index, node_id=p.node_id, reason=p.slot.reason,
                                previous_alloc=p.slot.previous) for p in plan.placed],
            stop=[PlannedStop(alloc_id=s.alloc.id, index=s.alloc.index,
                              node_id=s.alloc.node_id, reason=s.reason) for s in plan.stops],
            unplaced=len(plan.unplaced), placement=why)

    async def alloc_logs(self, data: bytes) -> AllocLogsReply:
        req = decode(data, AllocLogs)
        alloc: AllocView = resolve(self.projector.allocs, req.id, "allocation")
        # whether it may still write, read before its log: a follow that sees "ended"
        # has already been sent everything
        running = alloc.status in LIVE
        ask = LogsRequest(alloc_id=alloc.id, offset=req.offset, tail=req.tail,
                          max_bytes=req.max_bytes)
        try:
            msg = await self.nc.request(logs_subject(alloc.node_id), msgspec.json.encode(ask),
                                        timeout=LOGS_TIMEOUT_S)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            raise ApiError("unavailable", f"node {alloc.node_id}'s agent does not answer "
                           "(is it running?)") from None
        try:
            reply = logs_reply_decoder.decode(msg.data)
        except msgspec.DecodeError:
            raise ApiError("unavailable", f"node {alloc.node_id}'s agent answered something "
                           "that is not a log") from None
        if reply.missing and running:
            # placed, not started yet: no output so far (a follow waits for it)
            return AllocLogsReply(alloc_id=alloc.id, node_id=alloc.node_id, data="", offset=0,
                                  next_offset=0, size=0, truncated=False, running=True)
        if not reply.ok:
            raise ApiError("not_found" if reply.missing else "unavailable",
                           f"node {alloc.node_id}: {reply.error}")
        return AllocLogsReply(
            alloc_id=alloc.id, node_id=alloc.node_id, data=reply.data, offset=reply.offset,
            next_offset=reply.next_offset, size=reply.size, truncated=reply.truncated,
            running=running)
