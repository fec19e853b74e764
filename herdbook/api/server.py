"""The request/reply API: a NATS micro service on ``herd.api.v1.>`` in a queue group,
so several control-plane replicas share it.

Requests and replies are JSON. A reply is ``{"ok": true, "result": ...}`` or
``{"ok": false, "code": "refused|not_found|bad_request|unavailable|storage_full",
"error": "..."}``.
Commands decide on the current view and append with optimistic concurrency; the
reply is sent after the view has applied the new event (read-your-writes).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Protocol

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError
from nats.micro import add_service
from nats.micro.request import Request

import herdbook
from herdbook.api.history_routes import HistoryRoutes
from herdbook.config import Config
from herdbook.control.lookup import ApiError, resolve
from herdbook.control.metrics import Metrics
from herdbook.control.present import alloc_json, eval_json, instance_json, node_json
from herdbook.events.alloc import AllocRequeueApproved, AllocStatus
from herdbook.events.base import new_id
from herdbook.events.codec import decode_resources
from herdbook.events.evals import EvalTrigger, Step
from herdbook.events.jobs import JobDeregistered, JobRegistered, JobSpecError, parse_job_spec
from herdbook.events.node import NodeDeclared, NodeEvent
from herdbook.events.pool import PoolScaled
from herdbook.events.states import Health, NodeClass, resolve_state_filter
from herdbook.events.store import ConflictError, EventStore, StorageFullError, stream_last_seq
from herdbook.events.subjects import (
    API_PREFIX,
    EVENTS_STREAM,
    HEARTBEATS_STREAM,
    InvalidIdError,
    resources_subject,
    validate_id,
)
from herdbook.projector.eval_view import EvalRefused, spawn, step
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors import intents
from herdbook.reactors.membership import decide_approve, decide_delete, decide_reject
from herdbook.reactors.pools import LIVE
from herdbook.reactors.refused import CommandRefused
from herdbook.reactors.sweeper import Sweeper

log = logging.getLogger(__name__)

QUEUE_GROUP = "herd-api"
_encoder = msgspec.json.Encoder()
PAGE_BYTES = 700_000          # replies stay well under NATS's 1 MB max_payload
MAX_PAGE_ITEMS = 5000
COMMAND_ATTEMPTS = 5


_CALLER: ContextVar[str | None] = ContextVar("herd_api_caller", default=None)


class _Claims(Protocol):
    actor: str


def caller(req: _Claims) -> str:
    """Who the event is recorded as: the user the request's subject names
    (``herd.api.v1.<route>.<user>``, which only that user's credentials may publish on),
    else, on the plain route subject (no credentials, or the control plane's own), what
    the request claims."""
    return _CALLER.get() or req.actor


class ListRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    filter_approval: list[str] = []
    filter_state: list[str] = []
    labels: dict[str, str] = {}
    wide: bool = False
    limit: int = MAX_PAGE_ITEMS
    next_token: str | None = None


class NodeRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: str
    reason: str = ""
    actor: str = "operator"
    urgent: bool = False
    deadline_s: float | None = None
    force: bool = False
    node_class: NodeClass = NodeClass.STANDARD
    labels: dict[str, str] = {}
    user: str = ""
    tenant: str = ""


class PoolRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pool: str = ""
    size: int | None = None
    reason: str = ""
    actor: str = "operator"


class JobRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    spec: dict[str, Any]
    actor: str = "operator"


class AllocListRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    node_id: str = ""
    job_id: str = ""
    status: list[str] = []


class EvalListRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    status: list[str] = []
    job_id: str = ""


Decide = Callable[[NodeView, NodeRequest], NodeEvent]


class Api:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner,
                 sweeper: Sweeper, rebuild: Callable[[], Awaitable[dict[str, Any]]],
                 instance: str, config: Config | None = None,
                 metrics: Metrics | None = None) -> None:
        self.config = config or Config()
        self.is_leader: Callable[[], bool] = lambda: True
        """Whether this replica holds the leader lease (set by the control plane)."""
        self.nc = nc
        self.store = store
        self.projector = projector
        self.sweeper = sweeper
        self.rebuild = rebuild
        self.instance = instance
        self.metrics = metrics
        self.service: Any = None
        self.started = time.monotonic()
        self._counts: Counter[str] = Counter()
        self._counts_at = -1

    async def start(self) -> None:
        self.service = await add_service(
            self.nc, name="herd-api", version=herdbook.__version__,
            description="herdbook control plane API", queue_group=QUEUE_GROUP)
        routes: dict[str, Callable[[bytes], Awaitable[Any]]] = {
            "node.list": self.node_list,
            "node.describe": self.node_describe,
            "node.approve": self._command(lambda v, r: decide_approve(v, caller(r), r.reason)),
            "node.reject": self._command(lambda v, r: decide_reject(v, caller(r), r.reason)),
            "node.delete": self._command(lambda v, r: decide_delete(v, caller(r), r.reason)),
            "node.cordon": self._command(lambda v, r: intents.decide_cordon(v, caller(r), r.reason)),
            "node.uncordon": self._command(
                lambda v, r: intents.decide_uncordon(v, caller(r), r.reason)),
            "node.drain": self._command(lambda v, r: intents.decide_drain(
                v, caller(r), r.reason, r.urgent, r.deadline_s)),
            "node.undrain": self._command(lambda v, r: intents.decide_undrain(
                v, caller(r), r.reason, self._liveness(v))),
            "node.disable": self._command(
                lambda v, r: intents.decide_disable(v, caller(r), r.reason)),
            "node.enable": self._command(lambda v, r: intents.decide_enable(
                v, caller(r), r.reason, self._liveness(v), r.force)),
            "node.reboot": self._command(lambda v, r: intents.decide_reboot(v, caller(r), r.reason)),
            "node.add": self.node_add,
            "node.claim": self._command(lambda v, r: intents.decide_claim(
                v, caller(r), r.user, r.tenant, r.reason)),
            "node.release": self._command(lambda v, r: intents.decide_release(
                v, caller(r), r.user, r.reason)),
            "node.wipe": self._command(lambda v, r: intents.decide_wipe(
                v, caller(r), r.reason, r.force, float(self.config.sensitive.wipe_timeout))),
            "alloc.requeue": self.alloc_requeue,
            "node.conformance": self.node_conformance,
            "view.rebuild": self.view_rebuild,
            "instance.list": self.instance_list,
            "instance.describe": self.instance_describe,
            "pool.list": self.pool_list,
            "pool.status": self.pool_status,
            "pool.scale": self.pool_scale,
            "job.register": self.job_register,
            "job.status": self.job_status,
            "job.stop": self.job_stop,
            "eval.list": self.eval_list,
            "eval.status": self.eval_status,
            "eval.retry": self.eval_retry,
            "alloc.list": self.alloc_list,
            "alloc.status": self.alloc_status,
            "status": self.status,
        }
        routes.update(HistoryRoutes(self.nc, lambda: self.projector.nodes).routes())
        for route, handler in routes.items():
            wrapped = self._wrap(handler, route)
            name = route.replace(".", "-")
            await self.service.add_endpoint(name=name, subject=f"{API_PREFIX}.{route}",
                                            handler=wrapped)
            await self.service.add_endpoint(name=f"{name}-as", subject=f"{API_PREFIX}.{route}.*",
                                            handler=wrapped)

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()

    def _wrap(self, handler: Callable[[bytes], Awaitable[Any]],
              route: str = "") -> Callable[[Request], Awaitable[None]]:
        depth = API_PREFIX.count(".") + route.count(".") + 2

        async def endpoint(request: Request) -> None:
            started = time.monotonic()
            tokens = request.subject.split(".")
            token = _CALLER.set(None)
            try:
                if len(tokens) == depth + 1:
                    _CALLER.set(validate_id(tokens[-1], "user"))
                result = await handler(request.data)
                body = {"ok": True, "result": result}
            except ApiError as err:
                body = {"ok": False, "code": err.code, "error": str(err)}
            except CommandRefused as err:
                body = {"ok": False, "code": "refused", "error": str(err)}
            except StorageFullError as err:
                # Said once in the log by whoever noticed it, not once per request.
                body = {"ok": False, "code": "storage_full", "error": str(err)}
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as err:
                why = self.store.storage_full() if self.store.storage_full else None
                if why is not None:
                    body = {"ok": False, "code": "storage_full", "error": why}
                else:
                    log.warning("API request on %s: NATS did not answer (%s)",
                                request.subject, type(err).__name__)
                    body = {"ok": False, "code": "unavailable",
                            "error": "NATS did not answer in time; try again"}
            except (InvalidIdError, msgspec.ValidationError, msgspec.DecodeError, ValueError,
                    JobSpecError) as err:
                body = {"ok": False, "code": "bad_request", "error": str(err)}
            except Exception as err:
                log.exception("API request on %s failed", request.subject)
                body = {"ok": False, "code": "internal", "error": f"internal error: {err!r}"}
            finally:
                _CALLER.reset(token)
            await request.respond(_encoder.encode(body))
            if self.metrics is not None:
                self.metrics.observe_request(route, time.monotonic() - started)
        return endpoint

    # queries ----------------------------------------------------------------
    def _json(self, view: NodeView, wide: bool = True) -> dict[str, Any]:
        timeout = self.sweeper.timeouts(view).heartbeat_timeout
        return node_json(view, self.sweeper.heartbeat_age(view.id), timeout, wide=wide,
                         allocations=self._alloc_counts().get(view.id, 0))

    def _alloc_counts(self) -> Counter[str]:
        """Live allocations per node, computed once per view position."""
        if self._counts_at != self.projector.folded_seq:
            self._counts = Counter(a.node_id for a in self.projector.allocs.values()
                                   if not a.terminal)
            self._counts_at = self.projector.folded_seq
        return self._counts

    async def node_list(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=ListRequest)
        approvals = {a.upper() for a in req.filter_approval}
        bad = approvals - {"PENDING", "APPROVED", "REJECTED"}
        if bad:
            raise ApiError("bad_request", f"unknown approval {sorted(bad)[0]!r}; choose from "
                                          "pending, approved, rejected")
        states = resolve_state_filter(req.filter_state) if req.filter_state else None
        limit = max(1, min(req.limit, MAX_PAGE_ITEMS))
        items: list[dict[str, Any]] = []
        size = 0
        next_token = None
        for node_id in sorted(self.projector.nodes):
            if req.next_token is not None and node_id <= req.next_token:
                continue
            view = self.projector.nodes[node_id]
            if approvals and view.approval.value not in approvals:
                continue
            if states is not None and view.state not in states and not (
                    "UNHEALTHY" in states and view.health is Health.UNHEALTHY):
                continue
            if any(view.info.labels.get(k) != v for k, v in req.labels.items()):
                continue
            item = self._json(view, req.wide)
            size += len(_encoder.encode(item)) + 1
            if items and (len(items) >= limit or size > PAGE_BYTES):
                next_token = items[-1]["id"]
                break
            items.append(item)
        return {"items": items, "next_token": next_token}

    def _resolve(self, ident: str) -> NodeView:
        view: NodeView = resolve(self.projector.nodes, ident, "node")
        return view

    async def node_describe(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=NodeRequest)
        view = self._resolve(req.id)
        out = self._json(view)
        beat = self.sweeper.beats.get(view.id)
        out["heartbeat"] = None if beat is None or not beat.boot_id else {
            "boot_id": beat.boot_id, "seq": beat.seq, "agent_sent_at": beat.sent_at,
            "gpu_count": beat.gpu_count, "running_allocs": beat.running_allocs,
            "reattaching": beat.reattaching, "fingerprint": beat.fingerprint}
        try:
            msg = await self.nc.jetstream().get_last_msg(
                HEARTBEATS_STREAM, resources_subject(view.id), direct=True)
            out["resources"] = msgspec.to_builtins(decode_resources(msg.data or b""))
        except (NotFoundError, msgspec.DecodeError):
            out["resources"] = None
        return out

    # commands ---------------------------------------------------------------
    def _command(self, decide: Decide) -> Callable[[bytes], Awaitable[Any]]:
        async def handler(data: bytes) -> dict[str, Any]:
            req = msgspec.json.decode(data, type=NodeRequest)
            validate_id(req.id)
            for _ in range(COMMAND_ATTEMPTS):
                view = self.projector.nodes.get(req.id)
                if view is None:
                    raise ApiError("not_found", f"node {req.id} not found")
                event = decide(view, req)
                try:
                    seq = await self.store.append(event, expected_version=view.version)
                except ConflictError:
                    # Someone wrote first: catch the view up, decide again.
                    latest = await self.store.last_sequence("node", req.id)
                    await self.projector.wait_applied(latest)
                    continue
                await self.projector.wait_applied(seq)
                after = self.projector.nodes.get(req.id)
                return {"event": event.event_name, "event_id": event.event_id, "seq": seq,
                        "node": None if after is None else self._json(after)}
            raise ApiError("unavailable", f"node {req.id} kept changing; try again")
        return handler

    def _liveness(self, view: NodeView) -> intents.HeartbeatFacts:
        beat = self.sweeper.beats.get(view.id)
        return intents.HeartbeatFacts(
            heartbeat_age=self.sweeper.heartbeat_age(view.id),
            heartbeat_timeout=self.sweeper.timeouts(view).heartbeat_timeout,
            gpu_count=None if beat is None else beat.gpu_count,
            fingerprint=None if beat is None else beat.fingerprint)

    async def node_add(self, data: bytes) -> dict[str, Any]:
        """Declare a node that has never reported (UNKNOWN) — Lattice's inventory."""
        req = msgspec.json.decode(data, type=NodeRequest)
        validate_id(req.id)
        if req.id in self.projector.nodes:
            raise CommandRefused(f"node {req.id} already exists")
        event = NodeDeclared(node_id=req.id, actor=caller(req), reason=req.reason,
                             node_class=req.node_class, labels=req.labels)
        try:
            seq = await self.store.append(
                event, expected_version=await self.store.last_sequence("node", req.id))
        except ConflictError as err:
            raise CommandRefused(f"node {req.id} changed meanwhile; try again") from err
        await self.projector.wait_applied(seq)
        after = self.projector.nodes.get(req.id)
        return {"event": event.event_name, "event_id": event.event_id, "seq": seq,
                "node": None if after is None else self._json(after)}

    async def instance_list(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=PoolRequest)
        items = [instance_json(i) for _, i in sorted(self.projector.instances.items())
                 if not req.pool or i.pool == req.pool]
        return {"items": items, "next_token": None}

    async def instance_describe(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=NodeRequest)
        return instance_json(resolve(self.projector.instances, req.id, "instance"))

    def _pool_json(self, name: str) -> dict[str, Any]:
        pool = self.config.pools[name]
        instances = [i for i in self.projector.instances.values() if i.pool == name]
        by_state = Counter(inst.state.value for inst in instances)
        nodes = [self.projector.nodes[i.node_id] for i in instances
                 if i.state in LIVE and i.node_id in self.projector.nodes]
        desired = self.projector.pool_sizes.get(name)
        return {"name": name, "provider": pool.provider, "min_nodes": pool.min_nodes,
                "max_nodes": pool.max_nodes, "desired": desired,
                "target": max(pool.min_nodes, min(pool.max_nodes,
                                                  pool.min_nodes if desired is None else desired)),
                "live": sum(by_state.get(s.value, 0) for s in LIVE),
                "instances": dict(by_state),
                "nodes_by_state": dict(Counter(n.state for n in nodes)),
                "auto_replace": pool.health.auto_replace, "class": pool.node_class,
                "labels": dict(pool.labels)}

    async def pool_list(self, data: bytes) -> dict[str, Any]:
        return {"items": [self._pool_json(name) for name in sorted(self.config.pools)],
                "next_token": None}

    async def pool_status(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=PoolRequest)
        if req.pool not in self.config.pools:
            raise ApiError("not_found", f"pool {req.pool} not found")
        return self._pool_json(req.pool)

    async def pool_scale(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=PoolRequest)
        pool = self.config.pools.get(req.pool)
        if pool is None:
            raise ApiError("not_found", f"pool {req.pool} not found")
        if req.size is None or not pool.min_nodes <= req.size <= pool.max_nodes:
            raise CommandRefused(f"pool {req.pool} takes {pool.min_nodes} to {pool.max_nodes} nodes")
        seq = await self.store.append(PoolScaled(pool=req.pool, size=req.size, actor=caller(req),
                                                 reason=req.reason))
        await self.projector.wait_applied(seq)
        return self._pool_json(req.pool)

    # jobs and evaluations ------------------------------------------------------
    async def job_register(self, data: bytes) -> dict[str, Any]:
        """Register (or update) a job and create its job-register evaluation."""
        req = msgspec.json.decode(data, type=JobRequest)
        spec = parse_job_spec(msgspec.json.encode(req.spec), "job")
        eval_id = new_id()
        version = await self.store.last_sequence("job", spec.id)
        registered = JobRegistered(job_id=spec.id, spec=spec, actor=caller(req))
        try:
            await self.store.append(registered, expected_version=version)
        except ConflictError as err:
            raise CommandRefused(f"job {spec.id} changed meanwhile; try again") from err
        [created] = spawn(None, EvalTrigger.JOB_REGISTER, eval_id, spec.id,
                          priority=spec.priority, actor=caller(req))
        seq = await self.store.append(
            msgspec.structs.replace(created, causation_id=registered.event_id),
            expected_version=0)
        await self.projector.wait_applied(seq)
        return {"job": self._job_json(spec.id), "eval_id": eval_id}

    def _job_json(self, job_id: str) -> dict[str, Any]:
        job = self.projector.jobs.get(job_id)
        if job is None:
            raise ApiError("not_found", f"job {job_id} not found")
        evals = sorted((e for e in self.projector.evals.values() if e.job_id == job_id),
                       key=lambda e: e.version)
        return {"id": job.id, "status": job.status, "version": job.job_version,
                "count": job.spec.count, "priority": job.spec.priority,
                "command": list(job.spec.command),
                "resources": msgspec.to_builtins(job.spec.resources),
                "constraints": msgspec.to_builtins(job.spec.constraints),
                "requeue": msgspec.to_builtins(job.spec.requeue),
                "evals": [eval_json(e) for e in evals], "stop_reason": job.stop_reason,
                "allocations": dict(Counter(a.status.value for a in self.projector.allocs.values()
                                            if a.job_id == job_id))}

    async def job_status(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=NodeRequest)
        return self._job_json(req.id)

    async def job_stop(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=NodeRequest)
        job = self.projector.jobs.get(req.id)
        if job is None:
            raise ApiError("not_found", f"job {req.id} not found")
        if job.status == "dead":
            raise CommandRefused(f"job {req.id} is already stopped")
        try:
            await self.store.append(JobDeregistered(job_id=req.id, reason=req.reason,
                                                    actor=caller(req)),
                                    expected_version=job.version)
        except ConflictError as err:
            raise CommandRefused(f"job {req.id} changed meanwhile; try again") from err
        [created] = spawn(None, EvalTrigger.JOB_DEREGISTER, new_id(), req.id,
                          priority=job.spec.priority, actor=caller(req))
        seq = await self.store.append(created, expected_version=0)
        await self.projector.wait_applied(seq)
        return self._job_json(req.id)

    async def eval_list(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=EvalListRequest)
        wanted = {s.lower() for s in req.status}
        items = [eval_json(e) for e in sorted(self.projector.evals.values(),
                                              key=lambda e: e.version)
                 if (not wanted or e.status.value in wanted)
                 and (not req.job_id or e.job_id == req.job_id)]
        return {"items": items, "next_token": None}

    async def eval_status(self, data: bytes) -> dict[str, Any]:
        """One evaluation and its chain: PreviousEval back to the first, NextEval and
        BlockedEval forward."""
        req = msgspec.json.decode(data, type=NodeRequest)
        evals = self.projector.evals
        wanted = resolve(evals, req.id, "eval")
        chain: list[dict[str, Any]] = []
        seen: set[str] = set()
        first = wanted
        while first.previous_eval in evals and first.previous_eval not in seen:
            seen.add(first.id)
            first = evals[first.previous_eval]
        current: Any = first
        while current is not None and current.id not in seen | {c["id"] for c in chain}:
            chain.append(eval_json(current))
            following = current.next_eval or current.blocked_eval
            current = evals.get(following) if following else None
        return {"eval": eval_json(wanted), "chain": chain}

    async def eval_retry(self, data: bytes) -> dict[str, Any]:
        """failed -- retry --> scheduling: the broker delivers the eval again."""
        req = msgspec.json.decode(data, type=NodeRequest)
        view = resolve(self.projector.evals, req.id, "eval")
        try:
            event = step(view, Step.RETRY, req.reason or "retried by an operator",
                         actor=caller(req))
        except EvalRefused as err:
            raise CommandRefused(f"{err} (only a failed eval can be retried)") from err
        try:
            seq = await self.store.append(event, expected_version=view.version)
        except ConflictError as err:
            raise CommandRefused(f"eval {view.id} changed meanwhile; try again") from err
        await self.projector.wait_applied(seq)
        return eval_json(self.projector.evals[view.id])

    async def alloc_list(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data or b"{}", type=AllocListRequest)
        wanted = {s.lower() for s in req.status}
        bad = wanted - {s.value for s in AllocStatus}
        if bad:
            raise ApiError("bad_request", f"unknown allocation status {sorted(bad)[0]!r}; "
                           "choose from " + ", ".join(s.value for s in AllocStatus))
        node_id = resolve(self.projector.nodes, req.node_id, "node").id if req.node_id else ""
        job_id = resolve(self.projector.jobs, req.job_id, "job").id if req.job_id else ""
        items = [alloc_json(a) for a in sorted(self.projector.allocs.values(),
                                               key=lambda a: (a.job_id, a.index, a.version))
                 if (not node_id or a.node_id == node_id) and (not job_id or a.job_id == job_id)
                 and (not wanted or a.status.value in wanted)]
        return {"items": items, "next_token": None}

    async def node_conformance(self, data: bytes) -> dict[str, Any]:
        """The fleet grouped by conformance fingerprint, per pool, with what drifted."""
        groups: dict[tuple[str, str], list[NodeView]] = {}
        for view in self.projector.nodes.values():
            if view.fingerprint:
                key = (view.info.labels.get("pool", ""), view.fingerprint)
                groups.setdefault(key, []).append(view)
        items = [{"pool": pool or None, "fingerprint": fp, "nodes": len(members),
                  "expected": members[0].fingerprint_expected or None,
                  "drift": any(m.drift for m in members),
                  "node_ids": sorted(m.id for m in members)}
                 for (pool, fp), members in sorted(groups.items(),
                                                   key=lambda kv: (kv[0][0], -len(kv[1])))]
        return {"items": items, "next_token": None}

    async def alloc_requeue(self, data: bytes) -> dict[str, Any]:
        """An operator requeues an allocation lost on a sensitive node (never automatic)."""
        req = msgspec.json.decode(data, type=NodeRequest)
        alloc = resolve(self.projector.allocs, req.id, "allocation")
        if alloc.status is not AllocStatus.LOST:
            raise CommandRefused(f"allocation {alloc.id} is {alloc.status.value}: only a lost one is "
                                 "requeued")
        job = self.projector.jobs.get(alloc.job_id)
        if job is None or job.status == "dead":
            raise CommandRefused(f"job {alloc.job_id} is stopped: nothing to requeue")
        if alloc.requeue_allowed:
            raise CommandRefused(f"allocation {alloc.id} is requeued automatically by its job's policy")
        event = AllocRequeueApproved(node_id=alloc.node_id, alloc_id=alloc.id,
                                     reason=req.reason, actor=caller(req))
        try:
            await self.store.append(event, expected_version=self.projector.alloc_versions.get(
                alloc.node_id, 0))
        except ConflictError as err:
            raise CommandRefused(f"allocation {alloc.id} changed meanwhile; try again") from err
        [created] = spawn(None, EvalTrigger.NODE_UPDATE, new_id(), job.id,
                          priority=job.spec.priority, node_id=alloc.node_id, actor=caller(req))
        seq = await self.store.append(created, expected_version=0)
        await self.projector.wait_applied(seq)
        return {"alloc": alloc_json(self.projector.allocs[alloc.id]), "eval_id": created.eval_id}

    async def alloc_status(self, data: bytes) -> dict[str, Any]:
        req = msgspec.json.decode(data, type=NodeRequest)
        return alloc_json(resolve(self.projector.allocs, req.id, "allocation"))

    async def view_rebuild(self, data: bytes) -> dict[str, Any]:
        return await self.rebuild()

    async def status(self, data: bytes) -> dict[str, Any]:
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        return {
            "instance": self.instance,
            "version": herdbook.__version__,
            "nodes": len(self.projector.nodes),
            "stream_last_seq": last,
            "projector_seq": self.projector.committed_seq,
            "projector_lag": max(0, last - self.projector.committed_seq),
            "projector_failed": self.projector.failed,
            "deadletters": self.projector.deadletters,
            **self.sweeper.stats(),
            "liveness_detections": self.sweeper.detections,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "leader": self.is_leader(),
        }
