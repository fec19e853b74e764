"""One undecodable or unknown event never wedges a node (issue 14): a newer agent's
event type (or an attacker's) on `herd.node.<id>.*` is dead-lettered, and the node's
version is still its subject's last stored sequence, so the node goes DEGRADED and DOWN
on time and an operator's approval lands."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.events.states import Approval, Lifecycle
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.history.queries import verify
from tests.integration.conftest import running_plane
from tests.integration.test_agent_executor import eventually

pytestmark = pytest.mark.timeout(120)
TIMEOUT, GRACE = 1.0, 1.5


@pytest.fixture
async def plane(nats_server, tmp_path: Path) -> AsyncIterator[ControlPlane]:  # type: ignore[no-untyped-def]
    async with running_plane(
            f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp\n"
            f"lifecycle: {{heartbeat_timeout: {TIMEOUT}s, grace_period: {{standard: {GRACE}s}}}}\n"
    ) as control:
        yield control


async def test_an_unknown_event_type_on_a_node_subject_does_not_wedge_the_node(
        plane: ControlPlane, nats_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    agent = Agent(AgentOptions(server=nats_server.url, node_id="n1",
                               state_dir=str(tmp_path / "n1"), heartbeat_interval=0.2,
                               fake_gpus=1))
    task = asyncio.create_task(agent.run())
    await eventually(lambda: _true("n1" in projector.nodes
                                   and projector.nodes["n1"].lifecycle is Lifecycle.READY),
                     what="n1 READY")
    js = plane.nc.jetstream()
    before = projector.deadletters
    future = json.dumps({"type": "node.quantum_entangled", "node_id": "n1",
                         "event_id": "f" * 32, "at": "2026-11-23T00:00:00Z"}).encode()
    ack = await js.publish("herd.node.n1.quantum_entangled", future)
    await js.publish("herd.node.n1.quantum_entangled", b"\x00not json")
    await eventually(lambda: _true(projector.deadletters - before == 2), what="dead-lettered")
    assert projector.nodes["n1"].version > ack.seq   # the subject's last sequence

    await agent.stop()
    await task
    stopped = time.monotonic()
    await eventually(lambda: _true(projector.nodes["n1"].lifecycle is Lifecycle.DEGRADED),
                     timeout=TIMEOUT + 3, what="DEGRADED")
    assert time.monotonic() - stopped < TIMEOUT + 2
    await eventually(lambda: _true(projector.nodes["n1"].lifecycle is Lifecycle.DOWN),
                     timeout=GRACE + 3, what="DOWN")
    assert time.monotonic() - stopped < TIMEOUT + GRACE + 3

    reply = json.loads((await plane.nc.request(
        "herd.api.v1.node.approve", json.dumps({"id": "n1", "reason": "ok"}).encode(),
        timeout=10)).data)
    assert reply["ok"], reply
    assert projector.nodes["n1"].approval is Approval.APPROVED
    # The hash chain lists what it refused (a type this reader does not know, a body that
    # does not decode) and goes on after it: nothing vouched broke.
    report = await verify(js, "n1")
    assert report["broken"] == []
    assert [r["seq"] for r in report["refused"]] == [ack.seq, ack.seq + 1]
    last = await js.get_last_msg(EVENTS_STREAM, "herd.node.n1.>")
    assert last.subject == "herd.node.n1.approved"


async def _true(value: bool) -> bool:
    return value
