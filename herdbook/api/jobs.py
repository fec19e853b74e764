"""``job.*`` and ``eval.*``: list jobs; register, status and stop a job; list, show and
retry its evaluations."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from msgspec.structs import replace

from herdbook.api.caller import caller
from herdbook.api.deciders import (
    decide_new_eval,
    decide_register_job,
    decide_retry_eval,
    decide_stop_job,
)
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import (
    JOB_STATUSES,
    ById,
    EvalChain,
    EvalReply,
    JobReply,
    JobSummary,
    ListEvals,
    ListJobs,
    Page,
    RegisterJob,
    RegisterResult,
    RetryEval,
    StopJob,
)
from herdbook.api.present import eval_reply
from herdbook.events.evals import EvalTrigger
from herdbook.events.job_events import check_job_spec
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.placement_why import explain, phase
from herdbook.reactors.refused import AlreadyDone

Handler = Callable[[bytes], Awaitable[Any]]


async def create_eval(runner: DecideRunner, job_id: str, trigger: EvalTrigger, *,
                      priority: int, actor: str, node_id: str | None = None,
                      cause: str | None = None) -> str:
    """Append the evaluation an operator's command asks for; returns its id."""
    eval_id = runner.ids()
    await runner.run("eval", eval_id, lambda context: decide_new_eval(
        eval_id, job_id, trigger, priority=priority, actor=actor, node_id=node_id,
        cause=cause, context=context))
    return eval_id


class JobRoutes:
    def __init__(self, projector: ProjectorRunner, runner: DecideRunner) -> None:
        self.projector = projector
        self.runner = runner

    def routes(self) -> dict[str, Handler]:
        return {"job.list": self.job_list, "job.register": self.job_register,
                "job.status": self.job_status,
                "job.stop": self.job_stop, "eval.list": self.eval_list,
                "eval.status": self.eval_status, "eval.retry": self.eval_retry}

    def job_reply(self, job_id: str) -> JobReply:
        job = self.projector.jobs.get(job_id)
        if job is None:
            raise ApiError("not_found", f"job {job_id} not found")
        evals = sorted((e for e in self.projector.evals.values() if e.job_id == job_id),
                       key=lambda e: e.version)
        spec = job.spec
        allocs = [a for a in self.projector.allocs.values() if a.job_id == job_id]
        now = phase(job, allocs, evals)
        placement = explain(job, self.projector.nodes.values(), self.projector.allocs.values()) \
            if now in ("pending", "blocked") else None
        return JobReply(
            id=job.id, status=job.status, version=job.job_version, count=spec.count,
            priority=spec.priority, command=list(spec.command), resources=spec.resources,
            constraints=spec.constraints, requeue=spec.requeue,
            evals=[eval_reply(e) for e in evals], stop_reason=job.stop_reason,
            allocations=dict(Counter(a.status.value for a in allocs)), phase=now,
            placement=placement)

    async def job_list(self, data: bytes) -> Page[JobSummary]:
        """Every job (or those of the statuses asked for) by id, its allocations counted
        in one pass over all allocations, not one pass per job."""
        req = decode(data, ListJobs, empty=True)
        wanted = {s.lower() for s in req.status}
        bad = wanted - set(JOB_STATUSES)
        if bad:
            raise ApiError("bad_request", f"unknown job status {sorted(bad)[0]!r}; "
                           "choose from " + ", ".join(JOB_STATUSES))
        jobs = sorted((j for j in self.projector.jobs.values()
                       if not wanted or j.status in wanted), key=lambda j: j.id)
        counts: dict[str, Counter[str]] = {j.id: Counter() for j in jobs}
        of_job: dict[str, list[AllocView]] = {j.id: [] for j in jobs}
        for alloc in self.projector.allocs.values():
            tally = counts.get(alloc.job_id)
            if tally is not None:
                tally[alloc.status.value] += 1
                of_job[alloc.job_id].append(alloc)
        evals: dict[str, list[EvalView]] = {}
        for view in self.projector.evals.values():
            if view.job_id in of_job:
                evals.setdefault(view.job_id, []).append(view)
        return Page(items=[JobSummary(
            id=j.id, status=j.status, version=j.job_version, count=j.spec.count,
            priority=j.spec.priority, allocations=dict(sorted(counts[j.id].items())),
            phase=phase(j, of_job[j.id], evals.get(j.id, ())))
            for j in jobs])

    async def job_register(self, data: bytes) -> RegisterResult:
        """Register (or update) a job and create its job-register evaluation."""
        req = decode(data, RegisterJob)
        spec = check_job_spec(req.spec, "job")
        registered = await self.runner.run("job", spec.id, lambda context: decide_register_job(
            self.projector.jobs.get(spec.id), spec, actor=caller(req), context=context),
            wait=False)
        eval_id = await create_eval(self.runner, spec.id, EvalTrigger.JOB_REGISTER,
                                    priority=spec.priority, actor=caller(req),
                                    cause=registered.events[0].event_id)
        return RegisterResult(job=self.job_reply(spec.id), eval_id=eval_id)

    async def job_status(self, data: bytes) -> JobReply:
        return self.job_reply(decode(data, ById).id)

    async def job_stop(self, data: bytes) -> JobReply:
        req = decode(data, StopJob)
        try:
            await self.runner.run("job", req.id, lambda context: decide_stop_job(
                self.projector.jobs.get(req.id), req.id, actor=caller(req),
                reason=req.reason, context=context), wait=False)
        except AlreadyDone as done:   # stopped already: a success, nothing appended
            return replace(self.job_reply(req.id), unchanged=str(done))
        job = self.projector.jobs[req.id]
        await create_eval(self.runner, req.id, EvalTrigger.JOB_DEREGISTER,
                          priority=job.spec.priority, actor=caller(req))
        return self.job_reply(req.id)

    async def eval_list(self, data: bytes) -> Page[EvalReply]:
        req = decode(data, ListEvals, empty=True)
        wanted = {s.lower() for s in req.status}
        items = [eval_reply(e) for e in sorted(self.projector.evals.values(),
                                               key=lambda e: e.version)
                 if (not wanted or e.status.value in wanted)
                 and (not req.job_id or e.job_id == req.job_id)]
        return Page(items=items)

    async def eval_status(self, data: bytes) -> EvalChain:
        """One evaluation and its chain: PreviousEval back to the first, NextEval and
        BlockedEval forward."""
        req = decode(data, ById)
        evals = self.projector.evals
        wanted: EvalView = resolve(evals, req.id, "eval")
        chain: list[EvalReply] = []
        seen: set[str] = set()
        first = wanted
        while first.previous_eval is not None and first.previous_eval not in seen:
            previous = evals.get(first.previous_eval)
            if previous is None:
                break
            seen.add(first.id)
            first = previous
        current: EvalView | None = first
        while current is not None and current.id not in seen | {c.id for c in chain}:
            chain.append(eval_reply(current))
            following = current.next_eval or current.blocked_eval
            current = evals.get(following) if following else None
        return EvalChain(eval=eval_reply(wanted), chain=chain)

    async def eval_retry(self, data: bytes) -> EvalReply:
        """failed -- retry --> scheduling: the broker delivers the eval again."""
        req = decode(data, RetryEval)
        eval_id = resolve(self.projector.evals, req.id, "eval").id
        try:
            await self.runner.run("eval", eval_id, lambda context: decide_retry_eval(
                self.projector.evals.get(eval_id), eval_id, actor=caller(req),
                reason=req.reason, context=context))
        except AlreadyDone as done:   # the broker holds it already: nothing appended
            return replace(eval_reply(self.projector.evals[eval_id]), unchanged=str(done))
        return eval_reply(self.projector.evals[eval_id])
