"""The HTTP API's route table, from the same request and reply Structs the NATS API decodes
and encodes (``api/messages.py``, ``api/history_messages.py``; the node verbs' from the
command table, ``api/commands.py``): what ``web/http_api.py`` serves and ``web/openapi.py``
documents.

``ROUTES`` names, for every NATS route, the Struct its handler decodes the request as
(None: it takes no body) and the Struct its reply is; a unit test checks it covers the
API's routes exactly. ``READS`` are the routes a read-only token may call and the ones
served as GET with query parameters too; every other route is a command (fail closed:
a new route is a command until listed here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, get_type_hints

import msgspec

from herdbook.api.commands import VERBS
from herdbook.api.explain_messages import (
    AllocLogs,
    AllocLogsReply,
    EvalDescription,
    JobPlan,
    PlanJob,
)
from herdbook.api.history_messages import (
    AuditList,
    AuditPage,
    AuditVerify,
    ChainReport,
    NodeAt,
    NodeHistory,
    NodeHistoryReply,
    NodesAt,
    PastNodesPage,
)
from herdbook.api.messages import (
    AllocReply,
    ById,
    CommandResult,
    EvalChain,
    EvalReply,
    GpuById,
    GpuDetail,
    GpuSummary,
    InstanceReply,
    JobReply,
    JobSummary,
    ListAllocs,
    ListEvals,
    ListGpus,
    ListInstances,
    ListJobs,
    ListNodes,
    NodeDescription,
    NodeSummary,
    Page,
    PoolByName,
    RegisterJob,
    RegisterResult,
    RequeueAlloc,
    RequeueResult,
    ResetBreaker,
    RetryEval,
    ScalePool,
    StopJob,
)
from herdbook.api.repair_messages import ListRepairs, RepairsReply
from herdbook.events.authority import API_READS


class HttpError(msgspec.Struct, frozen=True, kw_only=True):
    """Every error reply: one of the API's error codes (``ErrorCode``), or
    ``unauthenticated`` / ``forbidden`` from the HTTP server's own checks."""

    code: str
    message: str


UNTYPED: Any = dict[str, Any]
"""The request of a route not (yet) in ``ROUTES``: any JSON object (its handler decodes it)."""


class Route(NamedTuple):
    request: Any
    """The request Struct, None for a route that takes no body."""
    reply: Any


Json = dict[str, Any]

ROUTES: dict[str, Route] = {
    "node.list": Route(ListNodes, Page[NodeSummary]),       # NodeDetail items with wide
    "node.describe": Route(ById, NodeDescription),
    "node.conformance": Route(None, Page[Json]),
    **{verb.route: Route(verb.request, CommandResult) for verb in VERBS},  # api/commands.py
    "node.history": Route(NodeHistory, NodeHistoryReply),
    "node.list_at": Route(NodesAt, PastNodesPage),
    "node.describe_at": Route(NodeAt, Json),
    "job.list": Route(ListJobs, Page[JobSummary]),
    "job.register": Route(RegisterJob, RegisterResult),
    "job.status": Route(ById, JobReply),
    "job.stop": Route(StopJob, JobReply),
    "job.plan": Route(PlanJob, JobPlan),
    "eval.list": Route(ListEvals, Page[EvalReply]),
    "eval.status": Route(ById, EvalChain),
    "eval.retry": Route(RetryEval, EvalReply),
    "eval.describe": Route(ById, EvalDescription),
    "alloc.list": Route(ListAllocs, Page[AllocReply]),
    "alloc.status": Route(ById, AllocReply),
    "alloc.requeue": Route(RequeueAlloc, RequeueResult),
    "alloc.logs": Route(AllocLogs, AllocLogsReply),
    "instance.list": Route(ListInstances, Page[InstanceReply]),
    "instance.describe": Route(ById, InstanceReply),
    "pool.list": Route(None, Page[Json]),
    "pool.status": Route(PoolByName, Json),
    "pool.scale": Route(ScalePool, Json),
    "status": Route(None, Json),
    "view.rebuild": Route(None, Json),
    "audit.list": Route(AuditList, AuditPage),
    "audit.verify": Route(AuditVerify, ChainReport),
    "breaker.status": Route(None, Json),
    "breaker.reset": Route(ResetBreaker, Json),
    "gpu.list": Route(ListGpus, Page[GpuSummary]),
    "gpu.describe": Route(GpuById, GpuDetail),
    "fleet.repairs": Route(ListRepairs, RepairsReply),
}


READS = API_READS   # events/authority.py: the one list, natsd/users.py reads it too

NODE_FILTERS = {"state": "filter_state", "approval": "filter_approval", "label": "labels"}
GPU_FILTERS = {"node": "node_id", "label": "labels"}


class Alias(NamedTuple):
    """A REST path that serves a read route with GET: its path parameters fill the request
    fields of the same name, its query parameters the others (``renames``: a query name
    for a field, e.g. ``state`` for ``filter_state``); with ``?at=``, route ``at``."""

    route: str
    at: str | None = None
    renames: Mapping[str, str] = {}


ALIASES: dict[str, Alias] = {
    "/v1/nodes": Alias("node.list", "node.list_at", NODE_FILTERS),
    "/v1/nodes/{id}": Alias("node.describe", "node.describe_at"),
    "/v1/nodes/{id}/history": Alias("node.history"),
    "/v1/jobs": Alias("job.list"),
    "/v1/jobs/{id}": Alias("job.status"),
    "/v1/evals": Alias("eval.list", renames={"job": "job_id"}),
    "/v1/evals/{id}": Alias("eval.status"),
    "/v1/allocs": Alias("alloc.list", renames={"node": "node_id", "job": "job_id"}),
    "/v1/allocs/{id}": Alias("alloc.status"),
    "/v1/instances": Alias("instance.list"),
    "/v1/instances/{id}": Alias("instance.describe"),
    "/v1/pools": Alias("pool.list"),
    "/v1/pools/{pool}": Alias("pool.status"),
    "/v1/audit": Alias("audit.list", renames={"node": "node_id"}),
    "/v1/gpus": Alias("gpu.list", renames=GPU_FILTERS),
    "/v1/nodes/{node_id}/gpus": Alias("gpu.list", renames=GPU_FILTERS),
    "/v1/gpus/{node_id}/{index}": Alias("gpu.describe"),
    "/v1/repairs": Alias("fleet.repairs", renames={"node": "node_id"}),
}
"""The REST paths the README and curl use, beside the route paths; ``web/http_api.py``
serves exactly these."""

NODE_ACTION_PATH = "/v1/nodes/{id}/"
"""``POST /v1/nodes/{id}/<verb>``: every verb of the command table (``api/commands.py``),
the id from the path, the rest of the request as the body."""


def node_actions(routes: Mapping[str, Any]) -> list[str]:
    """The verbs with an action path: the command table's, those the API serves."""
    return [verb.name for verb in VERBS if verb.route in routes]


STATUS_OF_CODE = {
    "not_found": 404, "bad_request": 400, "invalid": 400, "refused": 409, "conflict": 409,
    "forbidden": 403, "unauthenticated": 401, "unavailable": 503, "storage_full": 503,
}
"""An error code's HTTP status; any other code is 500."""


def http_path(route: str) -> str:
    return "/v1/" + route.replace(".", "/")


def untyped(handler: Callable[..., Any]) -> Route:
    """A route missing from ``ROUTES``: any JSON object in, its handler's return
    annotation out where msgspec can describe it."""
    try:
        reply = get_type_hints(handler).get("return", Any)
        msgspec.json.schema(reply)
    except Exception:  # noqa: BLE001 - an annotation msgspec cannot describe: any JSON
        reply = Any
    return Route(UNTYPED, reply)


def routes_of(live: Mapping[str, Callable[..., Any]] | None) -> dict[str, Route]:
    """``ROUTES``, or with ``live`` (the API's route handlers) exactly its routes, the
    typed ones from ``ROUTES``."""
    if live is None:
        return dict(ROUTES)
    return {name: ROUTES[name] if name in ROUTES else untyped(handler)
            for name, handler in live.items()}
