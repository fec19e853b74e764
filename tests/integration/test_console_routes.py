"""The console's chart routes over HTTP against a real nats-server and control plane
(issue 28 item 4): GET /v1/fleet/history folds the event log per bucket (the control
plane's own node READY in every bucket since it registered), a bad window is one line
and a 400, GET /v1/nodes/{id}/gpus/history answers from the ring (empty for a node
without telemetry) and 404 for an unknown node; both are in the OpenAPI document."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.integration.conftest import running_plane
from tests.integration.test_http_api import call, config, url


async def test_fleet_and_gpu_history_routes(tmp_path: Path) -> None:
    async with running_plane(config(tmp_path)) as plane, aiohttp.ClientSession() as session:
        status, body = await call(session, "GET", url(plane, "/v1/fleet/history?window=15m"))
        assert status == 200, body
        assert len(body["points"]) == 120 and body["step_s"] == 7.5
        assert body["points"][-1]["states"] == {"READY": 1}, body["points"][-1]
        assert body["points"][-1]["score"] == 100 and body["as_of_seq"] > 0
        assert body["detections"] == 0 and body["marks"] == []
        assert "heartbeat_age" in body["points"][-1]
        for bad in ("1y", "8d", "soon"):
            status, body = await call(session, "GET", url(plane, f"/v1/fleet/history?window={bad}"))
            assert (status, body["code"]) == (400, "bad_request"), body
            assert "\n" not in body["message"] and "window" in body["message"]
        status, body = await call(session, "GET",
                                  url(plane, f"/v1/nodes/{plane.node_id}/gpus/history"))
        assert status == 200 and body["times"] == [] and body["gpus"] == {}, body
        assert body["samples"] == 120
        status, body = await call(session, "GET", url(plane, "/v1/nodes/nobody/gpus/history"))
        assert (status, body["code"]) == (404, "not_found"), body
        status, doc = await call(session, "GET", url(plane, "/openapi.json"))
        assert {"/v1/fleet/history", "/v1/nodes/{node_id}/gpus/history"} <= set(doc["paths"])
