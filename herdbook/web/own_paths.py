"""The OpenAPI entries of the HTTP server's own endpoints (the route table's are
``openapi.document``'s): the event stream, the console's fleet grid and summaries, a
node's GPU history."""

from __future__ import annotations

from typing import Any

from herdbook.history.fleet_history import WINDOWS
from herdbook.web import sse
from herdbook.web.fleet_rows import FLEET_COLUMNS

JSON_OBJECT = {"application/json": {"schema": {"type": "object"}}}


def server_paths() -> dict[str, Any]:
    """``/v1/events``, ``/v1/fleet``, ``/v1/health-summary``, ``/v1/fleet/history`` and
    ``/v1/nodes/{node_id}/gpus/history``, as ``document``'s ``extra_paths``."""
    return {**sse.sse_paths(),
             "/v1/fleet": {"get": {"operationId": "fleet", "tags": ["fleet"],
                                   "summary": "the whole fleet for the grid: "
                                              + ", ".join(FLEET_COLUMNS),
                                   "responses": {"200": {"description": "columns, rows",
                                                         "content": JSON_OBJECT}}}},
             "/v1/health-summary": {"get": {
                 "operationId": "health_summary", "tags": ["fleet"],
                 "summary": "leader, projector lag, heartbeat ages, counts",
                 "responses": {"200": {"description": "the summary",
                                       "content": JSON_OBJECT}}}},
             "/v1/fleet/history": {"get": {
                 "operationId": "fleet_history", "tags": ["fleet"],
                 "summary": "the fleet over a window (?window=15m|1h|6h|24h|7d), from the "
                            "event log: per bucket state and health counts, health score, "
                            "detections, recoveries; heartbeat age p50/p99 as sampled",
                 "parameters": [{"name": "window", "in": "query", "schema": {
                     "type": "string", "enum": list(WINDOWS), "default": "1h"}}],
                 "responses": {"200": {"description": "from, to, step_s, points, marks",
                                       "content": JSON_OBJECT}}}},
             "/v1/nodes/{node_id}/gpus/history": {"get": {
                 "operationId": "gpu_history", "tags": ["gpu"],
                 "summary": "a node's GPUs' recent temperature, power and utilisation "
                            "(the control plane's in-memory ring, ?window=)",
                 "parameters": [{"name": "node_id", "in": "path", "required": True,
                                 "schema": {"type": "string",
                                            "pattern": "^[A-Za-z0-9_-]{1,128}$"}},
                                {"name": "window", "in": "query", "schema": {
                                    "type": "string", "enum": list(WINDOWS),
                                    "default": "15m"}}],
                 "responses": {"200": {"description": "times, gpus",
                                       "content": JSON_OBJECT}}}}}
