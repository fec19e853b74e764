"""The HTTP API's route table and its OpenAPI document, generated from the same request
and reply Structs the NATS API decodes and encodes (``api/messages.py``,
``api/history_messages.py``) by ``msgspec.json.schema_components``: no second schema.

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

import herdbook
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
    AddNode,
    AllocReply,
    ById,
    ClaimNode,
    CommandResult,
    DrainNode,
    EnableNode,
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
    NodeCommand,
    NodeDescription,
    NodeSummary,
    Page,
    PoolByName,
    RegisterJob,
    RegisterResult,
    ReleaseNode,
    RequeueAlloc,
    RequeueResult,
    ResetBreaker,
    RetryEval,
    ScalePool,
    StopJob,
    WipeNode,
)
from herdbook.api.repair_messages import ListRepairs, RepairsReply


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
NODE_COMMANDS = ("approve", "reject", "delete", "cordon", "uncordon", "undrain", "disable",
                 "reboot", "validate")

ROUTES: dict[str, Route] = {
    "node.list": Route(ListNodes, Page[NodeSummary]),       # NodeDetail items with wide
    "node.describe": Route(ById, NodeDescription),
    "node.conformance": Route(None, Page[Json]),
    "node.add": Route(AddNode, CommandResult),
    **{f"node.{verb}": Route(NodeCommand, CommandResult) for verb in NODE_COMMANDS},
    "node.drain": Route(DrainNode, CommandResult),
    "node.enable": Route(EnableNode, CommandResult),
    "node.claim": Route(ClaimNode, CommandResult),
    "node.release": Route(ReleaseNode, CommandResult),
    "node.wipe": Route(WipeNode, CommandResult),
    "node.history": Route(NodeHistory, NodeHistoryReply),
    "node.list_at": Route(NodesAt, PastNodesPage),
    "node.describe_at": Route(NodeAt, Json),
    "job.list": Route(ListJobs, Page[JobSummary]),
    "job.register": Route(RegisterJob, RegisterResult),
    "job.status": Route(ById, JobReply),
    "job.stop": Route(StopJob, JobReply),
    "eval.list": Route(ListEvals, Page[EvalReply]),
    "eval.status": Route(ById, EvalChain),
    "eval.retry": Route(RetryEval, EvalReply),
    "alloc.list": Route(ListAllocs, Page[AllocReply]),
    "alloc.status": Route(ById, AllocReply),
    "alloc.requeue": Route(RequeueAlloc, RequeueResult),
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

READS = frozenset({
    "node.list", "node.describe", "node.conformance", "node.history", "node.list_at",
    "node.describe_at", "job.list", "job.status", "eval.list", "eval.status", "alloc.list",
    "alloc.status", "instance.list", "instance.describe", "pool.list", "pool.status",
    "status", "audit.list", "audit.verify", "breaker.status", "gpu.list", "gpu.describe",
    "fleet.repairs",
})

GET_ALIASES: dict[str, tuple[str, tuple[str, ...]]] = {
    "/v1/gpus": ("gpu.list", ()),
    "/v1/nodes/{node_id}/gpus": ("gpu.list", ("node_id",)),
    "/v1/gpus/{node_id}/{index}": ("gpu.describe", ("node_id", "index")),
    "/v1/repairs": ("fleet.repairs", ()),
}
"""REST-ish GET paths documented beside the route paths: path -> (route, the request
fields its path parameters fill). The server routes them (``web/server.py``)."""

STATUS_OF_CODE = {
    "not_found": 404, "bad_request": 400, "invalid": 400, "refused": 409, "conflict": 409,
    "forbidden": 403, "unauthenticated": 401, "unavailable": 503, "storage_full": 503,
}
"""An error code's HTTP status; any other code is 500."""


def http_path(route: str) -> str:
    return "/v1/" + route.replace(".", "/")


REF = "#/components/schemas/{name}"


def _error_responses() -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": REF.format(name="HttpError")}}}}
    return {str(status): {"description": ", ".join(c for c, s in STATUS_OF_CODE.items()
                                                   if s == status), **error}
            for status in sorted(set(STATUS_OF_CODE.values()))} | {
        "500": {"description": "internal", **error}}


def _query_parameters(request: type[Any]) -> list[dict[str, Any]]:
    (schema,), components = msgspec.json.schema_components([request], ref_template=REF)
    struct = components[schema["$ref"].rsplit("/", 1)[-1]]
    return [{"name": name, "in": "query", "required": name in struct.get("required", []),
             "schema": prop, **({"explode": True} if prop.get("type") == "array" else {})}
            for name, prop in struct.get("properties", {}).items()
            if prop.get("type") != "object"]


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


def document(extra_paths: dict[str, Any] | None = None,
             live: Mapping[str, Callable[..., Any]] | None = None) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route (POST with the request Struct as the JSON
    body; reads also as GET with query parameters), plus ``extra_paths`` (the server's
    own endpoints). ``live``: the API's routes as served (default: ``ROUTES``)."""
    routes = routes_of(live)
    types: list[Any] = [HttpError]
    for route in routes.values():
        types += [route.reply] + ([route.request] if route.request is not None else [])
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    by_type = iter(schemas[1:])
    paths: dict[str, Any] = {}
    errors = _error_responses()
    for name, route in routes.items():
        reply = next(by_type)
        request = next(by_type) if route.request is not None else None
        ok = {"200": {"description": "the result",
                      "content": {"application/json": {"schema": reply}}}, **errors}
        post: dict[str, Any] = {"operationId": name.replace(".", "_"),
                                "summary": f"NATS route {name}", "tags": [name.split(".")[0]],
                                "responses": ok}
        if route.request is UNTYPED:
            post["description"] = "not yet in herdbook/web/openapi.py ROUTES: any JSON object"
        if request is not None:
            post["requestBody"] = {"required": False,
                                   "content": {"application/json": {"schema": request}}}
        item: dict[str, Any] = {"post": post}
        if name in READS:
            item["get"] = {**{k: v for k, v in post.items() if k != "requestBody"},
                           "operationId": name.replace(".", "_") + "_get",
                           "parameters": _query_parameters(route.request)
                           if route.request is not None else []}
        paths[http_path(name)] = item
    for path, (name, in_path) in GET_ALIASES.items():
        get = paths.get(http_path(name), {}).get("get")
        if get is None:
            continue
        params = [{**p, "in": "path", "required": True} if p["name"] in in_path else p
                  for p in get["parameters"]]
        paths[path] = {"get": {**get, "operationId": path.strip("/").replace("/", "_")
                               .replace("{", "").replace("}", ""),
                               "summary": f"{get['summary']} (GET {path})",
                               "parameters": params}}
    paths.update(extra_paths or {})
    return {
        "openapi": "3.1.0",
        "info": {"title": "herdbook HTTP API", "version": herdbook.__version__,
                 "description": "The NATS request/reply API of the control plane over HTTP: "
                                "every route a.b is POST /v1/a/b with the same JSON body."},
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "with `herd up --auth`: `herd creds operator --http`"}}},
        "security": [{}, {"bearer": []}],
    }
