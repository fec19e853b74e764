"""The OpenAPI document is the HTTP API's contract: schemathesis, an OpenAPI fuzzer, runs
every check it has (server errors, status codes, content types, headers, response
schemas, schema-valid requests accepted, schema-violating ones refused, missing
required headers, undeclared methods answered 405 with a matching Allow header, auth
not ignored, stateful sequences through the document's links) against a real control
plane's HTTP server, without auth and with `--auth` and a token, and finds nothing.

Bounded: a fixed number of examples per operation and a fixed seed (printed, and
overridable with HERD_FUZZ_SEED to explore), so the run is repeatable and takes a minute
or two on two cores. Docs: docs/http-api.md#the-contract."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from herdbook.web.openapi import document
from tests.integration.conftest import running_plane
from tests.integration.test_http_api import config, token

pytest.importorskip("schemathesis", reason="schemathesis is in the test extras")

SEED = int(os.environ.get("HERD_FUZZ_SEED", "20261125"))
EXAMPLES = int(os.environ.get("HERD_FUZZ_EXAMPLES", "2"))


async def fuzz(url: str, tmp_path: Path, *options: str, examples: int = EXAMPLES) -> None:
    """schemathesis's CLI (its own process: its generators are CPU-bound and would stall
    the control plane's event loop in this one) against ``url``'s document. One worker:
    with two threads, Hypothesis's ``ast.parse`` of a strategy's lambda hit CPython's
    "AST constructor recursion depth mismatch" (not thread-safe in 3.11)."""
    print(f"schemathesis seed {SEED} ({examples} examples per operation)")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "schemathesis.cli", "run", url + "openapi.json",
        "--checks", "all", "--max-examples", str(examples), "--seed", str(SEED),
        "--generation-database", "none", "--workers", "1", "--request-timeout", "20",
        "--no-color", "--report-dir", str(tmp_path / "report"), *options,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.integration.fuzz_hooks",
             "PYTHONPATH": str(Path(__file__).parents[2])})
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=400)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-20000:]
    assert "failures" not in text.splitlines()[-1] or " 0 failures" in text, text[-4000:]


@pytest.mark.timeout(600)
async def test_the_fuzzer_finds_nothing_without_auth(tmp_path: Path) -> None:
    async with running_plane(config(tmp_path)) as plane:
        assert plane.web is not None
        await fuzz(plane.web.url, tmp_path)


@pytest.mark.timeout(600)
async def test_the_fuzzer_finds_nothing_with_auth_and_a_token(tmp_path: Path) -> None:
    async with running_plane(config(tmp_path, auth=True)) as plane:
        assert plane.web is not None
        secret = await token(tmp_path, "fuzz")
        # the stateful phase ran without auth; here what a token changes: every request
        # authenticated (the checks include ignored_auth: one without it must be a 401)
        await fuzz(plane.web.url, tmp_path, "--header", f"Authorization: Bearer {secret}",
                   "--phases", "examples,coverage,fuzzing", examples=max(2, EXAMPLES // 2))


def test_every_operation_has_a_summary_a_tag_and_an_operation_id() -> None:
    doc = document()
    ids = []
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            assert operation.get("summary"), (method, path)
            assert operation.get("tags"), (method, path)
            ids.append(operation["operationId"])
    assert len(ids) == len(set(ids))
    for path in ("/v1/nodes", "/v1/nodes/{id}", "/v1/nodes/{id}/cordon", "/v1/jobs",
                 "/v1/pools", "/v1/audit"):
        assert path in doc["paths"], path


@pytest.mark.timeout(400)
def test_an_openapi_linter_reports_no_error(tmp_path: Path) -> None:
    """Redocly's CLI (from npm, run by npx; its recommended rules) lints the document: no
    error (a warning, such as no license named, is allowed)."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("node's npx is not installed: the OpenAPI linter runs from npm")
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(document()))
    import subprocess
    try:
        result = subprocess.run(
            [npx, "--yes", "@redocly/cli@2", "lint", "--format", "stylish", str(spec)],
            capture_output=True, text=True, timeout=360,
            env={**os.environ, "npm_config_cache": str(tmp_path / "npm")})
    except subprocess.TimeoutExpired:
        pytest.skip("npx could not fetch @redocly/cli in 6 minutes")
    text = result.stdout + result.stderr
    if result.returncode != 0 and ("npm ERR!" in text or "npm error" in text):
        pytest.skip("npx could not install @redocly/cli: " + text.strip().splitlines()[-1])
    assert result.returncode == 0, text[-8000:]


async def test_what_the_fuzzer_found_before_holds_one_request_each(tmp_path: Path) -> None:
    """Quick witnesses of the causes the fuzzer found (the fuzz runs above are slow)."""
    import aiohttp
    async with running_plane(config(tmp_path)) as plane, aiohttp.ClientSession() as web:
        assert plane.web is not None
        base = plane.web.url.rstrip("/")
        async with web.post(base + "/v1/fleet") as answer:    # GET-only: 405, not 404
            assert (answer.status, answer.headers["Allow"]) == (405, "GET,HEAD")
            assert (await answer.json())["code"] == "bad_request"
        async with web.get(base + "/v1/node/cordon") as answer:
            assert (answer.status, answer.headers["Allow"]) == (405, "POST")
        async with web.post(base + "/v1/node/cordon") as answer:   # a required body
            assert answer.status == 400
        async with web.post(base + "/v1/node/list", json={"limit": 2.0}) as answer:
            assert answer.status == 200, await answer.text()    # 2.0 is an integer
        async with web.post(base + "/v1/node/list",
                            json={"filter_state": ["Ready"]}) as answer:
            assert answer.status == 400     # the enum's words only
        async with web.post(base + "/v1/job/register", json={"spec": {}}) as answer:
            assert answer.status == 400 and "id" in (await answer.json())["message"]
        async with web.get(base + "/v1/pools") as answer:        # README paths served
            assert answer.status == 200
        async with web.get(base + "/v1/events?subject=herd.breaker.>") as answer:
            assert answer.status == 200
        # a start before 1970: nats-server never answered the consumer (a hang, seed 3)
        timeout = aiohttp.ClientTimeout(total=20)
        async with web.get(base + "/v1/audit?since=1620-01-01T00:00:00Z",
                           timeout=timeout) as answer:
            assert answer.status == 200 and (await answer.json())["items"]
        async with web.get(base + "/v1/events?since=1620-01-01T00:00:00Z",
                           timeout=timeout) as answer:
            assert answer.status == 200
            got = b""
            while b"id: 1\n" not in got:    # from the first event on
                got += await answer.content.readany()
        async with web.post(base + "/v1/fleet/repairs",    # valid, and refused (seed 4)
                            json={"since": "3426-04-29T09:58:04Z"}) as answer:
            assert (answer.status, (await answer.json())["code"]) == (409, "refused")
        async with web.get(base + "/v1/instances?pool=%0A") as answer:    # seed 6
            assert answer.status == 400     # Python's $ matched before the newline
        doc = document(live=plane.api.routes)
        body = doc["paths"]["/v1/node/cordon"]["post"]["requestBody"]
        assert body["required"] is True
    async with running_plane(config(tmp_path / "auth", auth=True)) as plane, \
            aiohttp.ClientSession() as web:
        assert plane.web is not None
        async with web.get(plane.web.url + "v1/status") as answer:
            assert answer.status == 401
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
