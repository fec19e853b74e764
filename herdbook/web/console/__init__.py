"""The web console: static files shipped as package data (no build step), served at ``/``
and ``/console/<file>`` of the HTTP API server. The pages are plain ES modules that read
the same ``/v1`` routes as ``curl`` does and follow ``/v1/events`` (Server-Sent Events)."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from herdbook.api.commands import GROUPS, spec_json
from herdbook.events.codec import EVENT_TYPES

ROOT = Path(__file__).parent
FILES = {"index.html": "text/html", "app.js": "text/javascript", "style.css": "text/css",
         "fleet.js": "text/javascript", "node.js": "text/javascript",
         "jobs.js": "text/javascript", "gpus.js": "text/javascript",
         "charts.js": "text/javascript", "detail.css": "text/css",
         "commands.js": "text/javascript",
         # uPlot (MIT, vendored from its npm package; its LICENSE beside it): the charts
         "vendor/uPlot.iife.min.js": "text/javascript", "vendor/uPlot.min.css": "text/css",
         "vendor/uPlot.LICENSE": "text/plain"}


def _serve(name: str) -> web.Response:
    body = (ROOT / name).read_bytes()
    return web.Response(body=body, content_type=FILES[name], charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


async def _index(request: web.Request) -> web.Response:
    return _serve("index.html")


async def _file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in FILES:   # a fixed list: no path from the request reaches the file system
        raise web.HTTPNotFound(text=f"no console file {name!r}")
    return _serve(name)


def event_types() -> list[str]:
    """Every event tag, the ``event:`` names of ``/v1/events``: an EventSource dispatches a
    named message only to a listener registered for that name."""
    return sorted(str(cls.__struct_config__.tag) for cls in EVENT_TYPES)


async def _event_types(request: web.Request) -> web.Response:
    return web.json_response(event_types())


async def _node_commands(request: web.Request) -> web.Response:
    """The node command table (``api/commands.py``): the page builds its buttons from it."""
    return web.json_response({"groups": list(GROUPS), "commands": spec_json()})


def add_routes(app: web.Application) -> None:
    """``GET /`` (the console) and ``GET /console/<file>`` (its script and style)."""
    app.router.add_get("/", _index)
    app.router.add_get("/console/event-types.json", _event_types)
    app.router.add_get("/console/node-commands.json", _node_commands)
    app.router.add_get("/console/{name}", _file)
    app.router.add_get("/console/{name:vendor/[^/]+}", _file)
