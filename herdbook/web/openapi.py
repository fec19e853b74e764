"""The HTTP API's OpenAPI document, generated from the route table (``web/routes.py``)
and its Structs by ``msgspec.json.schema_components``: no second schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

import herdbook
from herdbook.api.commands import BY_NAME
from herdbook.web.routes import (
    ALIASES,
    NODE_ACTION_PATH,
    READS,
    ROUTES,
    STATUS_OF_CODE,
    UNTYPED,
    Alias,
    HttpError,
    http_path,
    node_actions,
    routes_of,
)

QUERY_DURATION = r"^[0-9]{1,6}(\.[0-9]{1,6})?(ms|s|m|h|d)$"
"""A time in a GET's query besides RFC 3339: ``now`` or a duration ago (``5m``)."""
QUERY_TIME_SCHEMA = {"anyOf": [{"type": "string", "format": "date-time"},
                               {"type": "string", "enum": ["now"]},
                               {"type": "string", "pattern": QUERY_DURATION}],
                     "description": "RFC 3339, now, or a duration ago (5m, 2h, 1d)"}


REF = "#/components/schemas/{name}"


def _error_responses() -> dict[str, Any]:
    error = {"content": {"application/json": {"schema": {"$ref": REF.format(name="HttpError")}}}}
    out = {str(status): {"description": ", ".join(c for c, s in STATUS_OF_CODE.items()
                                                  if s == status), **error}
           for status in sorted(set(STATUS_OF_CODE.values()))} | {
        "500": {"description": "internal", **error}}
    out["401"]["headers"] = {"WWW-Authenticate": {
        "description": "Bearer (RFC 6750): the scheme a token is sent in",
        "schema": {"type": "string"}, "required": True}}
    return out


SUMMARIES = {
    "list": "list {what}s", "describe": "one {what}", "status": "one {what}",
    "history": "a {what}'s events", "list_at": "{what}s as the event log had them at a time",
    "describe_at": "one {what} as the event log had it at a time",
    "conformance": "{what}s that differ from their fingerprint group",
    "verify": "verify the {what} hash chain", "register": "register or update a {what}",
    "rebuild": "rebuild the {what} from the event log", "scale": "scale a {what}",
    "reset": "close the {what}", "requeue": "requeue an {what}", "retry": "retry an {what}",
    "plan": "dry-run a {what} (nothing is appended)", "logs": "an {what}'s output",
}


def summary_of(name: str) -> str:
    """One line per operation (a linter wants one): the route's verb on its noun."""
    what, _, verb = name.partition(".")
    if not verb:
        return f"the control plane's {what}"
    if what == "fleet":
        return f"the fleet's {verb}"
    template = SUMMARIES.get(verb)
    return template.format(what=what) if template else f"{verb} a {what}"


ID_PATTERN = "^[A-Za-z0-9_-]{1,128}$"
ID_PARAMETER = {"name": "id", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": ID_PATTERN},
                "description": "an id, or a unique prefix of one"}


def _body_required(request: Any) -> bool:
    """A body is required when its Struct has a field without a default."""
    if request is UNTYPED:
        return False
    return any(f.required for f in msgspec.structs.fields(request))


def _without_id(components: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """A node command's request without ``id`` (the path gives it) as a component."""
    name = schema["$ref"].rsplit("/", 1)[-1]
    body = components[name]
    key = f"{name}Body"
    components[key] = {**body, "title": key,
                       "properties": {k: v for k, v in body["properties"].items() if k != "id"},
                       "required": [r for r in body.get("required", []) if r != "id"]}
    return {"$ref": REF.format(name=key)}


LINKS: dict[tuple[str, str], dict[str, tuple[str, str]]] = {
    # (path, method) of the operation whose 200 gives an id -> link name -> (the operation
    # that takes it, the runtime expression of the value for its ``id`` parameter)
    ("/v1/node/add", "post"): {
        "describe": ("v1_nodes_id", "$request.body#/id"),
        "history": ("v1_nodes_id_history", "$request.body#/id"),
        "cordon": ("nodes_cordon", "$request.body#/id"),
        "drain": ("nodes_drain", "$request.body#/id"),
        "approve": ("nodes_approve", "$request.body#/id"),
        "delete": ("nodes_delete", "$request.body#/id")},
    ("/v1/job/register", "post"): {
        "status": ("v1_jobs_id", "$response.body#/job/id"),
        "eval": ("v1_evals_id", "$response.body#/eval_id")},
    ("/v1/nodes/{id}/cordon", "post"): {
        "uncordon": ("nodes_uncordon", "$request.path.id"),
        "describe": ("v1_nodes_id", "$request.path.id")},
    ("/v1/nodes/{id}/drain", "post"): {
        "undrain": ("nodes_undrain", "$request.path.id")},
}
"""The document's links: the stateful phase of a fuzzer follows them (add a node, then
act on it; register a job, then read it and its evaluation)."""


def _link(paths: dict[str, Any]) -> None:
    ops = {op["operationId"] for item in paths.values() for op in item.values()}
    for (path, method), links in LINKS.items():
        operation = paths.get(path, {}).get(method)
        if operation is None:
            continue
        # a copy: an operation's responses are shared with the paths it has beside it
        operation["responses"] = {**operation["responses"], "200": {
            **operation["responses"]["200"], "links": {
                name: {"operationId": target, "parameters": {"id": value}}
                for name, (target, value) in links.items() if target in ops}}}


def _alias_get(path: str, alias: Alias, paths: dict[str, Any],
               errors: dict[str, Any]) -> dict[str, Any]:
    get = paths[http_path(alias.route)]["get"]
    in_path = re.findall(r"{(\w+)}", path)
    query = [p for p in get["parameters"] if p["name"] not in in_path]
    if alias.at is not None and alias.at in ROUTES:
        have = {p["name"] for p in query}
        query += [p for p in paths[http_path(alias.at)]["get"]["parameters"]
                  if p["name"] not in have and p["name"] not in in_path]
    by_field = {field: name for name, field in alias.renames.items()}
    fields = {p["name"]: p for p in get["parameters"]}
    params = [{**fields[n], "in": "path", "required": True, "schema": _in_path(fields[n])}
              for n in in_path] + [
        {**p, "name": by_field.get(p["name"], p["name"])} for p in query]
    operation_id = path.strip("/").replace("/", "_").replace("{", "").replace("}", "")
    responses = {**get["responses"], **errors}
    if alias.at is not None and alias.at in ROUTES:
        # With ?at= the reply is the past route's: either, as the description says.
        past = paths[http_path(alias.at)]["get"]["responses"]["200"]
        reply = responses["200"]["content"]["application/json"]["schema"]
        responses["200"] = {"description": f"the result ({alias.at} with ?at=)", "content": {
            "application/json": {"schema": {"anyOf": [
                reply, past["content"]["application/json"]["schema"]]}}}}
    return {**get, "operationId": operation_id, "summary": f"{get['summary']} (GET {path})",
            "parameters": params, "responses": responses}


def _in_path(parameter: dict[str, Any]) -> dict[str, Any]:
    """A path parameter is never empty: an id filter that may be empty in a query is an
    id in a path."""
    schema: dict[str, Any] = parameter["schema"]
    if schema.get("type") == "string":
        return {**schema, "pattern": ID_PATTERN}
    return schema


def _query_parameters(request: type[Any]) -> list[dict[str, Any]]:
    """A read's request fields as query parameters (``web/http_api.py``'s ``query_body``
    reads them): a list repeats (``?state=READY&state=DOWN``), a time also takes now or a
    duration ago, ``labels`` takes ``k=v`` (as ``label``); an object field is not one."""
    (schema,), components = msgspec.json.schema_components([request], ref_template=REF)
    struct = components[schema["$ref"].rsplit("/", 1)[-1]]
    times = {f.encode_name for f in msgspec.structs.fields(request)
             if "datetime" in str(f.type)}
    out = []
    for name, prop in struct.get("properties", {}).items():
        if name == "labels":
            prop = {"type": "array", "items": {"type": "string", "pattern": "^[^=]*=.*$"},
                    "description": "key=value"}
        elif prop.get("type") == "object":
            continue
        elif name in times:
            prop = {**QUERY_TIME_SCHEMA, "default": None}
        if "$ref" in prop or "anyOf" in prop and name not in times:
            prop = _inline(prop, components)
        out.append({"name": name, "in": "query", "required": name in struct.get("required", []),
                    "schema": prop, **({"explode": True} if prop.get("type") == "array" else {})})
    return out


def _inline(prop: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema without references (``$ref`` to an enum, ``T | None``
    as just ``T``: a query parameter is absent, never null)."""
    if "$ref" in prop:
        return {k: v for k, v in components[prop["$ref"].rsplit("/", 1)[-1]].items()
                if k != "title"}
    if "anyOf" in prop:
        kinds = [k for k in prop["anyOf"] if k.get("type") != "null"]
        if len(kinds) == 1:
            return {**_inline(kinds[0], components),
                    **{k: v for k, v in prop.items() if k not in ("anyOf", "default")}}
    if prop.get("type") == "array" and "$ref" in prop.get("items", {}):
        return {**prop, "items": _inline(prop["items"], components)}
    return prop


def _about(route: str) -> str:
    """A verb's first help line (``api/commands.py``), before its NATS route."""
    verb = BY_NAME.get(route.removeprefix("node.")) if route.startswith("node.") else None
    return "" if verb is None else verb.help.split("\n", 1)[0] + " "


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
                                "summary": summary_of(name), "tags": [name.split(".")[0]],
                                "description": _about(name) + f"NATS route herd.api.v1.{name}",
                                "responses": ok}
        if route.request is UNTYPED:
            post["description"] += ("; not yet in herdbook/web/openapi.py ROUTES: any JSON "
                                    "object")
        if request is not None:
            post["requestBody"] = {"required": _body_required(route.request),
                                   "content": {"application/json": {"schema": request}}}
        item: dict[str, Any] = {"post": post}
        if name in READS:
            item["get"] = {**{k: v for k, v in post.items() if k != "requestBody"},
                           "operationId": name.replace(".", "_") + "_get",
                           "parameters": _query_parameters(route.request)
                           if route.request is not None else []}
        paths[http_path(name)] = item
    for path, alias in ALIASES.items():
        if alias.route not in routes:
            continue
        paths[path] = {"get": _alias_get(path, alias, paths, errors)}
    for action in node_actions(routes):
        name = f"node.{action}"
        post = paths[http_path(name)]["post"]
        body = _without_id(components, post["requestBody"]["content"]["application/json"]
                           ["schema"])
        paths[NODE_ACTION_PATH + action] = {"post": {
            **{k: v for k, v in post.items() if k != "requestBody"},
            "operationId": f"nodes_{action}", "summary": f"{summary_of(name)} (by path)",
            "parameters": [ID_PARAMETER],
            "requestBody": {"required": False,
                            "content": {"application/json": {"schema": body}}}}}
    for item in (extra_paths or {}).values():
        for operation in item.values():
            operation["responses"] = {**errors, **operation["responses"]}
    paths.update(extra_paths or {})
    _link(paths)
    return {
        "openapi": "3.1.0",
        "info": {"title": "herdbook HTTP API", "version": herdbook.__version__,
                 "description": "The NATS request/reply API of the control plane over HTTP: "
                                "every route a.b is POST /v1/a/b with the same JSON body."},
        "servers": [{"url": "/", "description": "the control plane that serves this document "
                                               "(herd up --http-port, default 8641)"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer",
                       "description": "with `herd up --auth`: `herd creds operator --http`"}}},
        "security": [{}, {"bearer": []}],
    }
