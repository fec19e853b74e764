"""Issue 26 item 5: bounded, escaped text. A reason over ``MAX_REASON`` is refused by the
CLI (exit 2, one line, before anything is sent), over HTTP (400) and over NATS
(bad_request); a reason that holds a newline, ESC, OSC or U+202E cannot forge a log line
nor act on the terminal that tails it; a node whose agent sent a megabyte of labels still
describes and lists."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from herdbook.api.messages import MAX_REASON
from herdbook.api.present import MAX_TEXT
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.plane import ControlPlane
from herdbook.events.node import NodeInfo, NodeInfoUpdated, NodeRegistered
from herdbook.events.store import EventStore, stream_last_seq
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.logs import FORMAT, EscapingFormatter
from tests.conftest import herd
from tests.integration.test_agent_executor import eventually
from tests.integration.test_http_api import call, plane, session, url  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(180)

FORGED = "2026-01-01 00:00:00,000 ERROR   herdbook.api: forged"


async def test_a_reason_over_the_maximum_is_refused_everywhere(
        plane: ControlPlane, session: aiohttp.ClientSession) -> None:  # noqa: F811
    assert plane.nc is not None and plane.projector is not None
    me = plane.node_id
    js = plane.nc.jetstream()
    before = await stream_last_seq(js, EVENTS_STREAM)
    long = "x" * (MAX_REASON + 1)

    status, body = await call(session, "POST", url(plane, "/v1/node/cordon"),
                              json={"id": me, "reason": long})
    assert (status, body["code"]) == (400, "bad_request"), body
    assert "reason" in body["message"] and str(MAX_REASON) in body["message"]

    reply = await plane.nc.request("herd.api.v1.node.cordon",
                                   json.dumps({"id": me, "reason": long}).encode(), timeout=10)
    answer = json.loads(reply.data)
    assert (answer["ok"], answer["code"]) == (False, "bad_request"), answer

    server = plane.url
    for args in (("node", "cordon", me, "-m", long), ("node", "cordon", me, "nope", "-m", long),
                 ("node", "claim", me, "--user", "u" * 200)):
        refused = await asyncio.to_thread(herd, *args, server=server)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "Traceback" not in refused.stderr
    assert refused.stderr.startswith("Error: user: ")
    # nothing was appended by any of them
    assert await stream_last_seq(js, EVENTS_STREAM) == before

    exactly = await asyncio.to_thread(herd, "node", "cordon", me, "-m", "y" * MAX_REASON,
                                      server=server)
    assert exactly.returncode == 0, exactly.stderr
    assert plane.projector.nodes[me].intent_reason == "y" * MAX_REASON


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """What `herd up`'s log handler (``herdbook.logs``) writes, at info level."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter(FORMAT))
    handler.setLevel(logging.INFO)
    logger = logging.getLogger("herdbook")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_reason_cannot_forge_a_log_line_nor_act_on_a_terminal(
        plane: ControlPlane, log_lines: io.StringIO) -> None:  # noqa: F811
    assert plane.projector is not None
    me = plane.node_id
    reason = f"fan\n{FORGED}\r\x1b[2J\x1b]0;pwned\x07\u202eevil"
    done = await asyncio.to_thread(herd, "node", "cordon", me, "-m", reason, server=plane.url)
    assert done.returncode == 0, done.stderr
    await eventually(lambda: _is(plane.projector.nodes[me].intent_reason == reason),
                     what="the cordon folded")
    written = log_lines.getvalue()
    assert "cordoned" in written, written
    for line in written.splitlines():
        assert not line.startswith("2026-01-01"), line
    assert not any(c in written for c in "\x1b\x07\r\u202e"), ascii(written)
    assert "fan\\n2026-01-01 00:00:00,000 ERROR" in written
    assert "\\x1b]0;pwned\\x07\\u202eevil" in written

    listed = await asyncio.to_thread(herd, "node", "describe", me, server=plane.url)
    assert listed.returncode == 0, listed.stderr
    assert not any(c in listed.stdout for c in "\x1b\x07\r\u202e"), ascii(listed.stdout)
    assert "\\u202eevil" in listed.stdout


async def _is(value: bool) -> bool:
    return value


async def test_a_megabyte_of_node_info_still_describes_and_lists(
        nc: Any, nats_server: Any, tmp_path: Path) -> None:
    store = EventStore(nc)
    await store.append(NodeRegistered(node_id="n1", boot_id="b"))
    huge = "p" * 1_040_000      # the event fits in NATS's 1 MB; the pool is shown twice
    await store.append(NodeInfoUpdated(node_id="n1", info=NodeInfo(
        hostname="h", labels={"pool": huge})))
    await store.append(NodeRegistered(node_id="n2", boot_id="b"))
    await store.append(NodeInfoUpdated(node_id="n2", info=NodeInfo(
        hostname="h" * 600_000, labels={f"k{i}": "v" for i in range(20_000)})))
    control = bootstrap(parse_config(f"nats: {{url: '{nats_server.url}'}}\n"
                                     f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-big\n"),
                        clock=SYSTEM_CLOCK)
    await control.start()
    try:
        assert control.projector is not None
        nodes = control.projector.nodes
        await eventually(lambda: _is("n2" in nodes and nodes["n2"].info.hostname != ""),
                         what="both nodes folded")

        async def cli(*args: str) -> Any:
            result = await asyncio.to_thread(herd, *args, server=nats_server.url)
            assert result.returncode == 0, (args, result.stderr)
            return result.stdout

        one = json.loads(await cli("node", "describe", "n1", "-o", "json"))
        cut = f"{'p' * MAX_TEXT}... ({len(huge)} chars)"
        assert one["labels"]["pool"] == cut and one["pool"] == cut
        two = json.loads(await cli("node", "describe", "n2", "-o", "json"))
        assert two["hostname"] == f"{'h' * MAX_TEXT}... (600000 chars)"
        assert two["labels"]["..."] == f"{20_000 - 128} more not shown"
        assert len(two["labels"]) == 129
        assert "n1" in await cli("node", "describe", "n1")
        listed = json.loads(await cli("node", "list", "--wide", "-o", "json"))
        assert {"n1", "n2"} <= {n["id"] for n in listed}
    finally:
        await control.stop()
