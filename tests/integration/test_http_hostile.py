"""Hostile HTTP requests to an in-process control plane's HTTP API: a body nested 50k
deep is a 400 (not a 500 with a traceback in the log), over HTTP and over NATS; request
lines over aiohttp's 8 KiB limit are answered 400 and logged as one line now and then,
not an ERROR with a traceback per request."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp

from herdbook.control.plane import ControlPlane
from tests.integration.test_http_api import call, plane, session, url  # noqa: F401 - fixtures

DEEP = b"[" * 50_000 + b"]" * 50_000


async def test_a_body_nested_50k_deep_is_a_bad_request(plane: ControlPlane,  # noqa: F811
                                                       session: aiohttp.ClientSession,  # noqa: F811
                                                       caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    me = plane.node_id
    job = b'{"spec": {"id": "deep", "command": ' + DEEP + b"}}"
    for path, body in (("/v1/job/register", job), (f"/v1/nodes/{me}/cordon", DEEP),
                       (f"/v1/nodes/{me}/cordon", b'{"reason": ' + DEEP + b"}"),
                       ("/v1/node/cordon", b'{"id": "x", "reason": ' + DEEP + b"}")):
        status, answer = await call(session, "POST", url(plane, path), data=body)
        assert (status, answer["code"]) == (400, "bad_request"), (path, answer)
        assert "nested" in answer["message"] or "Expected" in answer["message"], answer
    # 900 deep: under the decoder's limit; the spec is typed (the OpenAPI document says
    # what it takes), so the decoder refuses it at the first list where a string is due
    status, answer = await call(session, "POST", url(plane, "/v1/job/register"), data=(
        b'{"spec": {"id": "deep", "command": ' + b"[" * 900 + b"]" * 900 + b"}}"))
    assert (status, answer["code"]) == (400, "bad_request"), answer
    assert "$.spec.command[0]" in answer["message"], answer
    reply = json.loads((await plane.nc.request("herd.api.v1.job.register", job, timeout=10)).data)
    assert reply["code"] == "bad_request" and "$.spec.command[0]" in reply["error"], reply
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    status, _ = await call(session, "GET", url(plane, "/v1/status"))
    assert status == 200


async def raw_request(port: int, line: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(line + b"\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


async def test_request_lines_over_8_kib_are_refused_with_one_log_line_now_and_then(
        plane: ControlPlane, caplog: Any) -> None:  # noqa: F811
    caplog.set_level(logging.DEBUG)
    assert plane.web is not None
    port = int(plane.web.url.rstrip("/").rsplit(":", 1)[1])
    for i in range(20):   # before any auth: anyone who can reach the port
        answer = await raw_request(port, b"GET /v1/" + b"a" * (9000 + i) + b" HTTP/1.1")
        assert answer.split(b" ", 2)[1] == b"400", answer[:80]
    records = [r for r in caplog.records if r.name.startswith("aiohttp")
               or r.name.startswith("herdbook.web")]
    loud = [r for r in records if r.levelno >= logging.WARNING]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    assert loud[0].levelno == logging.WARNING and not loud[0].exc_info
    said = loud[0].getMessage()
    assert "\n" not in said and "answered 400 (LineTooLong)" in said and "aaaa" not in said
    status = (await raw_request(port, b"GET /v1/status HTTP/1.1")).split(b"\r\n", 1)[0]
    assert status == b"HTTP/1.1 200 OK"

