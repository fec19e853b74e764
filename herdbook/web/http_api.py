"""The HTTP API of the control plane (`herd up --http-port`, default 8641 on 127.0.0.1):
aiohttp, one Application, started and stopped as a control-plane part.

Every NATS API route ``a.b`` is ``POST /v1/a/b`` with the same JSON body, handled by the
same handler function in-process (no NATS round trip), with ``CALLER`` set to the
token's user as the NATS server sets it from ``herd.api.v1.<route>.<user>``. The reply is
the route's result (the ``Ok`` envelope's ``result``), or ``{"code", "message"}`` with an
HTTP status for the code (``openapi.STATUS_OF_CODE``). Read routes also answer GET with
query parameters, and the REST-ish aliases below (``/v1/nodes``, ``/v1/nodes/{id}``, ...)
serve curl. ``/v1/fleet`` is the whole fleet in one compact reply for the console's grid;
``/v1/events`` streams HERD_EVENTS as Server-Sent Events (``sse.py``); ``/openapi.json``
documents it all (``openapi.py``). Auth: ``auth.py``.
"""

from __future__ import annotations

import asyncio
import errno
import importlib
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

import msgspec
from aiohttp import web
from nats.aio.client import Client as NATS

from herdbook.api.caller import CALLER
from herdbook.api.lookup import ApiError, resolve
from herdbook.api.service import Api
from herdbook.clock import Clock
from herdbook.events.states import Lifecycle
from herdbook.history.fleet_history import WINDOWS, parse_window
from herdbook.history.queries import fleet_history
from herdbook.history.times import iso
from herdbook.hosts import is_loopback
from herdbook.web import sse
from herdbook.web.auth import (
    Principal,
    Refused,
    TokenBook,
    authenticate,
    authorize,
    check_bind,
    same_origin,
)
from herdbook.web.client_errors import ClientErrorLog
from herdbook.web.fleet_rows import FleetJson, SeenTimes
from herdbook.web.openapi import document
from herdbook.web.own_paths import server_paths
from herdbook.web.query import query_body
from herdbook.web.routes import (
    ALIASES,
    NODE_ACTION_PATH,
    READS,
    ROUTES,
    STATUS_OF_CODE,
    http_path,
    node_actions,
)
from herdbook.web.timeline import SAMPLE_S, AgeSeries

log = logging.getLogger(__name__)

DEFAULT_PORT = 8641
_NOT_HEARTBEATING = frozenset({Lifecycle.DOWN, Lifecycle.TERMINATED})
_encode = msgspec.json.encode
PRINCIPAL = web.RequestKey("principal", Principal)


class Heartbeats(Protocol):
    """``reactors.sweeper.Sweeper``: seconds since a node's last heartbeat, or None; its
    heartbeat times side by side and clock (``/v1/fleet`` reads every age in one pass)."""

    def heartbeat_age(self, node_id: str) -> float | None: ...

    @property
    def seen(self) -> SeenTimes: ...

    @property
    def clock(self) -> Clock: ...


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encode(body), status=status, content_type="application/json")


def error_response(status: int, code: str, message: str) -> web.Response:
    return json_response({"code": code, "message": message}, status)


class WebServer:
    """The aiohttp server as one control-plane part (``start``/``stop``)."""

    def __init__(self, api: Api, heartbeats: Heartbeats, nc: NATS, *, host: str, port: int,
                 tokens: TokenBook | None, clock: Clock, best_effort: bool = False) -> None:
        self.api = api
        self.heartbeats = heartbeats
        self.nc = nc
        self.host = host
        self.port = port
        self.tokens = tokens
        self.clock = clock
        self.best_effort = best_effort
        self.skipped: str | None = None
        """Why it does not serve (``best_effort`` and the port in use), or None."""
        self.closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._fleet = FleetJson()
        self.ages = AgeSeries()
        """The fleet's heartbeat age p50/p99 every ``SAMPLE_S`` (charts; not in the log)."""
        self._sampler: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        why = check_bind(self.host, self.tokens is not None)
        if why is not None:
            raise ValueError(why)
        self.closing.clear()
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0,
                                     logger=ClientErrorLog(self.clock))
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as err:
            await self._runner.cleanup()
            self._runner = None
            if not (self.best_effort and err.errno == errno.EADDRINUSE):
                raise
            self.skipped = (f"port {self.port} is in use (another herd up?); pass "
                            "--http-port to choose one")
            log.warning("HTTP API off: %s", self.skipped)
            return
        self._sampler = asyncio.create_task(self._sample_ages())
        server = site._server
        if isinstance(server, asyncio.base_events.Server) and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.closing.set()
        if self._sampler is not None:
            self._sampler.cancel()
            self._sampler = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._fleet.unfollow()

    # the application ----------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        get, post = app.router.add_get, app.router.add_post
        get("/openapi.json", self._openapi)
        get("/v1/fleet", self._fleet_reply)
        get("/v1/fleet/history", self._fleet_history)
        get("/v1/nodes/{node_id}/gpus/history", self._gpu_history)
        get("/v1/health-summary", self._health_summary)
        get("/v1/events", self._events)
        for path, alias in ALIASES.items():
            get(path, self._alias(alias.route, at=alias.at, renames=alias.renames))
        actions = "|".join(re.escape(a) for a in node_actions(self.api.routes))
        post(NODE_ACTION_PATH + "{action:(" + actions + ")}", self._node_action)
        # Every route's own path, with exactly its methods: aiohttp answers another method
        # 405 with an Allow header listing these (the document's), and an unknown path 404.
        for route in self.api.routes:
            post(http_path(route), self._route(route))
            if route in READS:
                get(http_path(route), self._route(route))
        try:
            console = importlib.import_module("herdbook.web.console")
        except ModuleNotFoundError:
            get("/", self._index)
        else:
            console.add_routes(app)
        return app

    @web.middleware
    async def _guard(self, request: web.Request,
                     handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) \
            -> web.StreamResponse:
        try:
            if self.tokens is None:
                # Loopback only: a name that resolves here but is not ours (DNS rebinding)
                # would otherwise pass the Origin check below.
                host = request.host.rsplit(":", 1)[0].strip("[]") if request.host else ""
                if not is_loopback(host):
                    raise Refused(403, "forbidden", f"Host {request.host!r} is not this "
                                  "server's loopback address (no --auth)")
            if request.method not in ("GET", "HEAD", "OPTIONS") and not same_origin(
                    request.headers.get("Origin"), request.host, request.scheme):
                raise Refused(403, "forbidden", "cross-origin request refused: Origin "
                              f"{request.headers.get('Origin')!r} is not this server")
            if request.path.startswith("/v1/"):
                query_token = request.query.get("token") if request.path == "/v1/events" \
                    else None
                request[PRINCIPAL] = authenticate(
                    self.tokens, request.headers.get("Authorization"), query_token)
            return await handler(request)
        except Refused as err:
            response = error_response(err.status, err.code, str(err))
            if err.status == 401:   # RFC 6750: say which scheme a token goes in
                response.headers["WWW-Authenticate"] = 'Bearer realm="herd"'
            return response
        except web.HTTPException as err:
            if err.status not in (404, 405):
                raise
            # aiohttp's own answers for no such path and a method the path has not: the
            # API's JSON error, with aiohttp's Allow header kept on a 405.
            code = "not_found" if err.status == 404 else "bad_request"
            message = (f"no route {request.path!r}; see /openapi.json" if err.status == 404
                       else f"{request.method} {request.path}: allowed "
                            + err.headers.get("Allow", ""))
            response = error_response(err.status, code, message)
            if "Allow" in err.headers:
                response.headers["Allow"] = err.headers["Allow"]
            return response

    async def call(self, request: web.Request, route: str, body: bytes) -> web.Response:
        """Run the API route ``route`` on ``body`` as the request's principal."""
        handler = self.api.routes.get(route)
        if handler is None:
            return error_response(404, "not_found", f"no route {route!r}; see /openapi.json")
        authorize(request[PRINCIPAL], route not in READS)
        started = self.clock.monotonic()
        token = CALLER.set(request[PRINCIPAL].user)
        try:
            result = await handler(body)
            response = json_response(result)
        except Exception as err:  # noqa: BLE001 - every error is one reply
            failed = self.api.failed(f"HTTP {route}", err)
            response = error_response(STATUS_OF_CODE.get(failed.code.value, 500),
                                      failed.code.value, failed.error)
        finally:
            CALLER.reset(token)
        if self.api.metrics is not None:
            self.api.metrics.observe_request(route, self.clock.monotonic() - started)
        return response

    # handlers -----------------------------------------------------------------------
    def _route(self, route: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            if request.method == "POST":
                return await self.call(request, route, await request.read())
            if route not in ROUTES:   # an untyped route: no fields to read a query as
                return await self.call(request, route, b"")
            return await self.call(request, route, query_body(route, request.query,
                                                              now=self.clock.now()))
        return handler

    def _alias(self, route: str, *, at: str | None = None,
               renames: Mapping[str, str] | None = None) \
            -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            chosen = at if at is not None and "at" in request.query else route
            body = query_body(chosen, request.query, request.match_info, renames,
                              now=self.clock.now())
            return await self.call(request, chosen, body)
        return handler

    async def _node_action(self, request: web.Request) -> web.Response:
        route = f"node.{request.match_info['action']}"
        raw = await request.read()
        try:
            fields = msgspec.json.decode(raw or b"{}")
        except msgspec.DecodeError as err:
            return error_response(400, "bad_request", f"body: {err}")
        except RecursionError:   # a 50k-deep [[[…: a bad body, not a server error
            return error_response(400, "bad_request", "body: JSON nested too deeply")
        if not isinstance(fields, dict):
            return error_response(400, "bad_request", "body: expected a JSON object")
        if "id" in fields:
            return error_response(400, "bad_request", "body: id is in the path, not the body")
        return await self.call(request, route, _encode({**fields,
                                                        "id": request.match_info["id"]}))

    async def _openapi(self, request: web.Request) -> web.Response:
        return json_response(document(server_paths(), self.api.routes))

    async def _index(self, request: web.Request) -> web.Response:
        return json_response({"api": "/v1/", "openapi": "/openapi.json",
                              "events": "/v1/events", "fleet": "/v1/fleet"})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        return await sse.stream(request, self.nc.jetstream(), self.closing, self.clock.now())

    def fleet(self) -> bytes:
        """The console's rows as the reply's JSON (``web/fleet_rows.py``'s ``FleetJson``): a
        row's event-log columns encoded once per view version, its GPU numbers once per
        telemetry sample, the heartbeat age per request."""
        projector = self.api.projector
        nodes = projector.nodes
        beats = self.heartbeats
        self._fleet.follow_once(nodes, projector.allocs, self.api.gpus.telemetry)
        return self._fleet.reply(getattr(nodes, "rows", nodes), projector.allocs.values,
                                 projector.folded_seq, projector.committed_seq,
                                 beats.seen, beats.clock.monotonic(),
                                 self.api.gpus.telemetry.latest)

    async def _fleet_reply(self, request: web.Request) -> web.Response:
        authorize(request[PRINCIPAL], False)
        return web.Response(body=self.fleet(), content_type="application/json")

    def heartbeat_ages(self) -> list[float]:
        """Seconds since each heartbeating node's last heartbeat."""
        return [a for n in self.api.projector.nodes.values() if n.lifecycle not in
                _NOT_HEARTBEATING and (a := self.heartbeats.heartbeat_age(n.id)) is not None]

    async def _sample_ages(self) -> None:
        while True:
            try:
                self.ages.add(self.clock.now().timestamp(), self.heartbeat_ages())
            except Exception:  # noqa: BLE001 - a chart's sample must not end the server
                log.exception("heartbeat age sample failed")
            await asyncio.sleep(SAMPLE_S)

    async def _fleet_history(self, request: web.Request) -> web.Response:
        authorize(request[PRINCIPAL], False)
        try:
            window = _window(request.query.get("window", "1h"))
        except ValueError as err:
            return error_response(400, "bad_request", str(err))
        end = self.clock.now()
        start = end - window
        try:
            result = await fleet_history(self.nc.jetstream(), start, end)
        except TimeoutError as err:
            return error_response(503, "unavailable", str(err))
        ages = self.ages.buckets(start, end, len(result["points"]))
        for point, age in zip(result["points"], ages, strict=True):
            point["heartbeat_age"] = age
        return json_response(result)

    async def _gpu_history(self, request: web.Request) -> web.Response:
        authorize(request[PRINCIPAL], False)
        try:
            window = _window(request.query.get("window", "15m"))
            view = resolve(self.api.projector.nodes, request.match_info["node_id"], "node")
        except ValueError as err:
            return error_response(400, "bad_request", str(err))
        except ApiError as err:
            return error_response(STATUS_OF_CODE.get(err.code, 400), err.code, str(err))
        ring = getattr(self.api.gpus.telemetry, "ring", None)
        now = self.clock.now()
        series = ring.series(view.id, (now - window).timestamp()) if ring is not None \
            else {"times": [], "gpus": {}}
        return json_response({"node_id": view.id, "from": iso(now - window), "to": iso(now),
                              "samples": None if ring is None else ring.samples, **series})

    async def _health_summary(self, request: web.Request) -> web.Response:
        status = await self.call(request, "status", b"")
        if status.status != 200 or not isinstance(status.body, bytes):
            return status
        info = msgspec.json.decode(status.body)
        nodes = self.api.projector.nodes
        ages = sorted(a for n in nodes.values() if n.lifecycle not in _NOT_HEARTBEATING
                      and (a := self.heartbeats.heartbeat_age(n.id)) is not None)

        def pct(q: float) -> float | None:
            return _round(ages[min(len(ages) - 1, int(q * len(ages)))]) if ages else None
        return json_response({
            "leader": info.get("leader"), "projector_lag": info.get("projector_lag"),
            "projector_seq": info.get("projector_seq"),
            "stream_last_seq": info.get("stream_last_seq"), "nodes": len(nodes),
            "heartbeat_age": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
            "by_state": dict(Counter(n.state for n in nodes.values())),
            "by_health": dict(Counter(str(n.health) for n in nodes.values()))})




def _window(text: str) -> timedelta:
    """One of the console's windows (``history.fleet.WINDOWS``), as the document says."""
    if text not in WINDOWS:
        raise ValueError(f"window {text!r}: choose from {', '.join(WINDOWS)}")
    return parse_window(text)


def _round(age: float | None) -> float | None:
    return None if age is None else round(age, 1)


def http_routes() -> dict[str, str]:
    """NATS route -> its POST path (for the docs and tests)."""
    return {route: http_path(route) for route in ROUTES}
