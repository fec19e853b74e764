"""``alloc.*``: list and show allocations; requeue one lost on a sensitive node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from herdbook.api.caller import caller
from herdbook.api.deciders import decide_requeue_alloc
from herdbook.api.jobs import create_eval
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import AllocReply, ById, ListAllocs, Page, RequeueAlloc, RequeueResult
from herdbook.api.present import alloc_reply
from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalTrigger
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.refused import AlreadyDone

Handler = Callable[[bytes], Awaitable[Any]]


class AllocRoutes:
    def __init__(self, projector: ProjectorRunner, runner: DecideRunner) -> None:
        self.projector = projector
        self.runner = runner

    def routes(self) -> dict[str, Handler]:
        return {"alloc.list": self.alloc_list, "alloc.status": self.alloc_status,
                "alloc.requeue": self.alloc_requeue}

    async def alloc_list(self, data: bytes) -> Page[AllocReply]:
        req = decode(data, ListAllocs, empty=True)
        wanted = {s.lower() for s in req.status}
        bad = wanted - {s.value for s in AllocStatus}
        if bad:
            raise ApiError("bad_request", f"unknown allocation status {sorted(bad)[0]!r}; "
                           "choose from " + ", ".join(s.value for s in AllocStatus))
        node_id = resolve(self.projector.nodes, req.node_id, "node").id if req.node_id else ""
        job_id = resolve(self.projector.jobs, req.job_id, "job").id if req.job_id else ""
        items = [alloc_reply(a) for a in sorted(self.projector.allocs.values(),
                                                key=lambda a: (a.job_id, a.index, a.version))
                 if (not node_id or a.node_id == node_id) and (not job_id or a.job_id == job_id)
                 and (not wanted or a.status.value in wanted)]
        return Page(items=items)

    async def alloc_status(self, data: bytes) -> AllocReply:
        return alloc_reply(resolve(self.projector.allocs, decode(data, ById).id, "allocation"))

    async def alloc_requeue(self, data: bytes) -> RequeueResult:
        """An operator requeues an allocation lost on a sensitive node (never automatic),
        then the node-update evaluation that places it again."""
        req = decode(data, RequeueAlloc)
        found: AllocView = resolve(self.projector.allocs, req.id, "allocation")
        alloc_id, node_id = found.id, found.node_id
        allocs, jobs = self.projector.allocs, self.projector.jobs
        try:
            await self.runner.run("alloc", node_id, lambda context: decide_requeue_alloc(
                allocs.get(alloc_id), alloc_id, jobs.get(found.job_id),
                self.projector.alloc_versions.get(node_id, 0), actor=caller(req),
                reason=req.reason, context=context), wait=False)
        except AlreadyDone as done:   # allowed already: a success, nothing appended
            return RequeueResult(alloc=alloc_reply(allocs[alloc_id]), eval_id="",
                                 unchanged=str(done))
        job = jobs[found.job_id]
        eval_id = await create_eval(self.runner, job.id, EvalTrigger.NODE_UPDATE,
                                    priority=job.spec.priority, actor=caller(req),
                                    node_id=node_id)
        return RequeueResult(alloc=alloc_reply(allocs[alloc_id]), eval_id=eval_id)
