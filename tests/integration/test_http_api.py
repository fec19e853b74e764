"""The HTTP API of an in-process control plane (`herd up --http-port`) against a real
nats-server: every route family over HTTP with its status codes, the OpenAPI document,
the event stream (SSE) and its resume, the origin and host checks without auth, and
with `--auth` the bearer tokens of the real `herd creds operator --http`."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.errors import StartupError
from herdbook.control.plane import ControlPlane
from herdbook.events.store import stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.web.openapi import ROUTES
from tests.conftest import HERD, free_port, herd, wait_until
from tests.integration.conftest import running_plane

JOB = {"id": "web-job", "count": 1, "command": ["sleep", "1"],
       "resources": {"cpu": 1, "memory_mb": 64, "gpus": 0}}


def config(tmp_path: Path, *, auth: bool = False, host: str = "127.0.0.1") -> str:
    return (f"nats: {{port: {free_port()}, auth: {str(auth).lower()}}}\n"
            f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-web\n"
            f"http: {{port: {free_port()}, host: '{host}'}}\n")


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with running_plane(config(tmp_path)) as control:
        yield control


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


def url(plane: ControlPlane, path: str) -> str:
    assert plane.web is not None
    return plane.web.url.rstrip("/") + path


async def call(session: aiohttp.ClientSession, method: str, target: str,
               **options: Any) -> tuple[int, Any]:
    async with session.request(method, target, **options) as response:
        return response.status, await response.json(content_type=None)


async def last_seq(plane: ControlPlane) -> int:
    return await stream_last_seq(plane.nc.jetstream(), EVENTS_STREAM)


async def test_every_route_family_answers_over_http_with_its_status_codes(
        plane: ControlPlane, session: aiohttp.ClientSession) -> None:
    me = plane.node_id
    for path in ("/v1/status", "/v1/nodes", f"/v1/nodes/{me}", f"/v1/nodes/{me}/history",
                 "/v1/nodes?at=now&state=READY", f"/v1/nodes/{me}?at=now", "/v1/jobs",
                 "/v1/evals", "/v1/allocs", "/v1/pools", "/v1/instances", "/v1/audit",
                 "/v1/audit/verify", "/v1/node/list?limit=1", "/v1/fleet",
                 "/v1/health-summary"):
        status, body = await call(session, "GET", url(plane, path))
        assert status == 200, (path, body)
    status, body = await call(session, "GET", url(plane, "/v1/nodes?state=READY&limit=1"))
    assert [n["id"] for n in body["items"]] == [me]

    status, body = await call(session, "POST", url(plane, "/v1/node/cordon"),
                              json={"id": me, "reason": "over http"})
    assert status == 200 and body["node"]["state"] == "CORDONED"
    assert plane.projector.nodes[me].intent_reason == "over http"
    # again: the goal already holds, a success with nothing appended (kubectl's
    # "already cordoned"), over HTTP and over NATS alike
    seq = await plane.store.last_sequence("node", me)
    status, body = await call(session, "POST", url(plane, f"/v1/nodes/{me}/cordon"))
    assert status == 200 and body["unchanged"] == f"node {me} already cordoned (state CORDONED)"
    assert body["event"] == "" and body["node"]["state"] == "CORDONED"
    reply = json.loads((await plane.nc.request("herd.api.v1.node.cordon", json.dumps(
        {"id": me}).encode(), timeout=10)).data)
    assert reply["ok"] and reply["result"]["unchanged"].endswith("already cordoned (state CORDONED)")
    assert await plane.store.last_sequence("node", me) == seq   # nothing appended
    status, body = await call(session, "POST", url(plane, f"/v1/nodes/{me}/uncordon"),
                              json={"reason": "done"})
    assert status == 200 and body["node"]["state"] == "READY"

    status, body = await call(session, "POST", url(plane, "/v1/job/register"),
                              json={"spec": JOB})
    assert status == 200 and body["job"]["id"] == "web-job", body
    status, body = await call(session, "GET", url(plane, "/v1/jobs"))
    assert [j["id"] for j in body["items"]] == ["web-job"]
    status, body = await call(session, "GET", url(plane, "/v1/jobs/web-job"))
    assert status == 200 and body["evals"]

    for method, path, options, want in (
            ("GET", "/v1/nodes/nope", {}, (404, "not_found")),
            ("GET", "/v1/jobs/nope", {}, (404, "not_found")),
            ("POST", "/v1/node/cordon", {"json": {"idx": me}}, (400, "bad_request")),
            ("POST", "/v1/node/cordon", {"data": b"{not json"}, (400, "bad_request")),
            ("GET", "/v1/nodes?limit=0", {}, (400, "bad_request")),
            ("GET", "/v1/nodes?color=red", {}, (400, "bad_request")),
            ("GET", "/v1/node/cordon", {}, (405, "bad_request")),
            ("POST", "/v1/no/such", {}, (404, "not_found")),
            ("POST", f"/v1/nodes/{me}/explode", {}, (404, "not_found"))):
        status, body = await call(session, method, url(plane, path), **options)
        assert (status, body["code"]) == want, (method, path, body)
        assert body["message"]


async def test_fleet_and_openapi(plane: ControlPlane, session: aiohttp.ClientSession) -> None:
    status, fleet = await call(session, "GET", url(plane, "/v1/fleet"))
    assert fleet["columns"][:3] == ["id", "state", "health"]
    row = dict(zip(fleet["columns"], fleet["rows"][0], strict=True))
    assert row["id"] == plane.node_id and row["state"] == "READY"
    # the console table's columns (issue 28 item 1): approval, intent, the last event, and
    # the GPU numbers (none: the requester node sends no telemetry; null, never 0)
    assert (row["approval"], row["intent"], row["allocs"]) == ("APPROVED", "ELIGIBLE", 0)
    assert row["last_event"] and row["last_event_at"]
    assert (row["gpu_temp_max"], row["gpu_util"]) == (None, None)
    assert fleet["version"] == plane.projector.committed_seq
    status, doc = await call(session, "GET", url(plane, "/openapi.json"))
    assert status == 200 and doc["openapi"].startswith("3.")
    for route in plane.api.routes:
        assert "/v1/" + route.replace(".", "/") in doc["paths"], route
    assert set(ROUTES) == set(plane.api.routes), "herdbook/web/openapi.py ROUTES: name each " \
        "API route with its request and reply Struct (and in READS if it only reads)"
    assert "/v1/events" in doc["paths"] and "/v1/fleet" in doc["paths"]


async def test_without_auth_a_cross_origin_post_or_a_foreign_host_is_refused(
        plane: ControlPlane, session: aiohttp.ClientSession) -> None:
    before = await last_seq(plane)
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Host": "evil.example"}):
        status, body = await call(session, "POST", url(plane, "/v1/node/cordon"),
                                  json={"id": plane.node_id}, headers=headers)
        assert (status, body["code"]) == (403, "forbidden"), headers
    assert await last_seq(plane) == before
    assert plane.projector.nodes[plane.node_id].state == "READY"
    assert plane.web is not None
    own = plane.web.url.rstrip("/")
    status, _ = await call(session, "POST", url(plane, "/v1/node/cordon"),
                           json={"id": plane.node_id}, headers={"Origin": own})
    assert status == 200


async def read_events(response: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    """The next ``count`` SSE messages (comments skipped)."""
    out: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    while len(out) < count:
        line = (await asyncio.wait_for(response.content.readline(), 10)).decode().rstrip("\n")
        if not line:
            if fields:
                out.append(fields)
                fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        fields[name] = json.loads(value) if name == "data" else value
    return out


async def test_sse_delivers_an_appended_event_and_resumes_after_last_event_id(
        plane: ControlPlane, session: aiohttp.ClientSession) -> None:
    me = plane.node_id
    events = url(plane, f"/v1/events?subject=herd.node.{me}.>")
    async with session.get(events) as live:
        assert live.headers["Content-Type"].startswith("text/event-stream")
        await asyncio.wait_for(live.content.readline(), 10)     # the opening comment
        for verb in ("cordon", "uncordon"):
            status, _ = await call(session, "POST", url(plane, f"/v1/nodes/{me}/{verb}"))
            assert status == 200
        first, second = await read_events(live, 2)
    assert (first["event"], second["event"]) == ("node.cordoned", "node.uncordoned")
    assert first["data"]["event"]["node_id"] == me
    assert int(first["id"]) == first["data"]["seq"] < int(second["id"])
    async with session.get(events, headers={"Last-Event-ID": first["id"]}) as resumed:
        (again,) = await read_events(resumed, 1)
    assert again["id"] == second["id"]
    async with session.get(url(plane, "/v1/events?since=1")) as replay:
        (oldest,) = await read_events(replay, 1)
    assert oldest["id"] == "1" and oldest["event"] == "node.registered"
    status, body = await call(session, "GET", url(plane, "/v1/events?subject=herd.hb.>"))
    assert (status, body["code"]) == (400, "bad_request")


async def test_a_non_loopback_bind_without_auth_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match="not a loopback address"):
        async with running_plane(config(tmp_path, host="0.0.0.0")):
            pass
    result = await asyncio.to_thread(herd, "up", "--data-dir", str(tmp_path / "e"),
                                     "--http-host", "0.0.0.0")
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr and "Traceback" not in result.stderr


# --auth ------------------------------------------------------------------------------
@pytest.fixture
async def auth_plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with running_plane(config(tmp_path, auth=True)) as control:
        yield control


async def token(tmp_path: Path, name: str, *args: str) -> str:
    """A token from the real `herd creds operator --http`, where `herd up` runs."""
    result = await asyncio.to_thread(herd, "creds", "operator", "--name", name, "--http",
                                     *args, "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 0, result.stderr
    found = re.search(r"token: (\S+)", result.stdout)
    assert found is not None, result.stdout
    return found.group(1)


def bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


async def test_with_auth_requests_need_a_token_that_maps_to_the_operator(
        auth_plane: ControlPlane, session: aiohttp.ClientSession, tmp_path: Path) -> None:
    plane, me = auth_plane, auth_plane.node_id
    cordon = url(plane, f"/v1/nodes/{me}/cordon")
    before = await last_seq(plane)
    for headers in ({}, bearer("herd_not-a-token"), {"Authorization": "Basic b3A6cHc="}):
        status, body = await call(session, "POST", cordon, headers=headers)
        assert (status, body["code"]) == (401, "unauthenticated"), headers
    status, _ = await call(session, "GET", url(plane, "/v1/fleet"))
    assert status == 401
    assert await last_seq(plane) == before

    alice = await token(tmp_path, "alice")
    reader = await token(tmp_path, "bob", "--read-only")
    status, body = await call(session, "GET", url(plane, "/v1/fleet"), headers=bearer(reader))
    assert status == 200
    status, body = await call(session, "POST", cordon, headers=bearer(reader))
    assert (status, body) == (403, {"code": "forbidden",
                                    "message": "this credential may only read"})
    assert await last_seq(plane) == before

    status, body = await call(session, "POST", cordon, headers=bearer(alice),
                              json={"actor": "someone-else", "reason": "as alice"})
    assert status == 200
    assert plane.projector.nodes[me].intent_actor == "op-alice"

    async with session.get(url(plane, f"/v1/events?since=1&token={alice}")) as stream:
        assert stream.status == 200
        (first,) = await read_events(stream, 1)
    assert first["id"] == "1"

    result = await asyncio.to_thread(herd, "creds", "revoke", "op-alice", "--data-dir",
                                     str(tmp_path / "d"))
    assert result.returncode == 0 and "HTTP token" in result.stdout, result.stderr
    status, body = await call(session, "POST", url(plane, f"/v1/nodes/{me}/uncordon"),
                              headers=bearer(alice))
    assert (status, body["code"]) == (401, "unauthenticated")
    status, _ = await call(session, "GET", url(plane, "/v1/status"), headers=bearer(reader))
    assert status == 200


async def test_herd_up_prints_the_url_it_serves(tmp_path: Path,
                                                session: aiohttp.ClientSession) -> None:
    port, out = free_port(), tmp_path / "up.out"
    with open(out, "wb") as stdout:
        proc = subprocess.Popen(
            [*HERD, "up", "--nats-port", str(free_port()), "--data-dir", str(tmp_path / "d"),
             "--node-id", "cp-url", "--http-port", str(port), "--log-level", "warning"],
            stdout=stdout, stderr=subprocess.STDOUT)
    try:
        await asyncio.to_thread(wait_until, lambda: "is up" in out.read_text(), 60,
                                what="herd up")
        assert f"console, HTTP API: http://127.0.0.1:{port}/" in out.read_text()
        status, body = await call(session, "GET", f"http://127.0.0.1:{port}/v1/status")
        assert status == 200 and body["instance"] == "cp-url"
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
    assert proc.returncode == 0, out.read_text()


async def test_the_default_port_in_use_leaves_http_off_an_explicit_one_fails(
        tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        text = (f"nats: {{port: {free_port()}}}\ndata_dir: '{tmp_path / 'd'}'\n"
                f"http: {{port: {port}}}\n")
        plane = bootstrap(parse_config(text), clock=SYSTEM_CLOCK, http_best_effort=True)
        info = await plane.start()
        try:
            assert info["http_url"] is None and "in use" in info["http_off"]
        finally:
            await plane.stop()
        with pytest.raises(StartupError, match="cannot serve HTTP"):
            async with running_plane(text.replace("'d'", "'e'").replace(
                    str(tmp_path / "d"), str(tmp_path / "e"))):
                pass
