"""The subject is the authority (issue 13): an attacker holding one agent's credentials
(`herd up --auth`, `herd creds agent n1`) publishes bodies that claim another type or
another node on the subjects it may publish. NATS stores them; nothing anywhere changes:
not the view, not the evals or allocations, not another agent's processes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.credentials import NatsAuth
from herdbook.events.alloc import AllocLost, AllocPlaced
from herdbook.events.codec import encode
from herdbook.events.job_events import JobRegistered, JobSpec
from herdbook.events.node import NodeApproved, NodeRegistered
from herdbook.events.states import Approval
from herdbook.events.subjects import EVENTS_STREAM
from tests.integration.test_agent_executor import eventually
from tests.integration.test_auth import connect_as, issue, plane  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


class Agents:
    def __init__(self, plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
        self.plane = plane
        self.tmp_path = tmp_path
        self.running: list[tuple[Agent, asyncio.Task[None]]] = []
        self.creds: dict[str, Path] = {}

    async def start(self, node_id: str) -> Agent:
        creds = self.creds[node_id] = await issue(self.tmp_path, "agent", node_id)
        agent = Agent(AgentOptions(server=self.plane.url, node_id=node_id,
                                   state_dir=str(self.tmp_path / node_id),
                                   heartbeat_interval=0.3, fake_gpus=1,
                                   auth=NatsAuth(creds=str(creds))))
        self.running.append((agent, asyncio.create_task(agent.run())))
        await asyncio.wait_for(agent.registered.wait(), 15)
        return agent


@pytest.fixture
async def agents(plane: ControlPlane, tmp_path: Path) -> AsyncIterator[Agents]:  # noqa: F811
    fleet = Agents(plane, tmp_path)
    try:
        yield fleet
    finally:
        for agent, task in fleet.running:
            await agent.stop()
            await asyncio.wait_for(task, 10)


def marker_command(path: Path) -> list[str]:
    return ["sh", "-c", f"touch {path}"]


async def test_bodies_claiming_another_type_or_node_change_nothing_anywhere(
        plane: ControlPlane, agents: Agents, tmp_path: Path) -> None:  # noqa: F811
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    victims = {node: await agents.start(node) for node in ("n2", "n3")}
    n1 = await agents.start("n1")
    await eventually(lambda: _true(all(n in projector.nodes for n in ("n1", "n2", "n3"))),
                     what="three nodes registered")
    dead: list[Any] = []

    async def on_dead(msg: Any) -> None:
        dead.append(msg)

    await plane.nc.subscribe("herd.deadletter.HERD_EVENTS", cb=on_dead)
    before = {n: projector.nodes[n] for n in ("n1", "n2", "n3")}
    evals_before, jobs_before = dict(projector.evals), dict(projector.jobs)
    marker = tmp_path / "pwned"

    attacker = await connect_as(plane, agents.creds["n1"], [])   # the stolen credentials
    js = attacker.jetstream()
    attacks = [
        # approve itself: an approval body on the one subject it may register on
        ("herd.node.n1.registered", NodeApproved(node_id="n1", actor="control-plane")),
        # register a job and place a workload on n3, on its own allocation subjects
        ("herd.alloc.n1.a1.running", JobRegistered(
            job_id="evil", spec=JobSpec(id="evil", command=marker_command(marker)))),
        ("herd.alloc.n1.a2.running", AllocPlaced(
            node_id="n3", alloc_id="a2", job_id="evil", eval_id="e1", index=0,
            command=marker_command(marker))),
        ("herd.alloc.n1.a3.lost", AllocPlaced(
            node_id="n1", alloc_id="a3", job_id="evil", eval_id="e1", index=0,
            command=marker_command(marker))),
        # a body naming n2 on n1's subjects
        ("herd.node.n1.registered", NodeRegistered(node_id="n2")),
        ("herd.alloc.n1.a4.lost", AllocLost(node_id="n2", alloc_id="a4")),
    ]
    seqs = []
    try:
        for subject, event in attacks:
            ack = await js.publish(subject, encode(event))   # NATS stores it: it is allowed
            seqs.append(ack.seq)
    finally:
        await attacker.close()
    await projector.wait_applied(seqs[-1], timeout=15)

    stored = [await plane.nc.jetstream().get_msg(EVENTS_STREAM, seq) for seq in seqs]
    assert [m.subject for m in stored] == [s for s, _ in attacks]
    await eventually(lambda: _true(len(dead) == len(attacks)), what="every attack dead-lettered")
    reasons = [m.headers["Herd-Error"] for m in dead]
    assert "node.approved for herd.node.n1.approved" in reasons[0]
    assert "herd.alloc.* may not carry job.registered" in reasons[1]
    assert "herd.alloc.n3.a2.placed" in reasons[2]
    assert "not for its subject herd.alloc.n1.a3.lost" in reasons[3]
    assert "herd.node.n2.registered" in reasons[4]
    assert "herd.alloc.n2.a4.lost" in reasons[5]

    # Nothing changed: n1 is still pending, n2 and n3 as they were, no job, eval or alloc.
    assert projector.nodes["n1"].approval is Approval.PENDING
    for node in ("n2", "n3"):
        view = projector.nodes[node]
        assert (view.approval, view.intent, view.info) == (
            before[node].approval, before[node].intent, before[node].info)
    assert "evil" not in projector.jobs and dict(projector.jobs) == jobs_before
    assert dict(projector.evals) == evals_before
    assert not any(a in projector.allocs for a in ("a1", "a2", "a3", "a4"))
    await asyncio.sleep(1.0)
    for agent in (*victims.values(), n1):
        assert agent.executor.running_count == 0 and not agent.allocs
    assert not marker.exists(), "an attacker's command ran on a node"

    # ...and n1 is not wedged: its version is its subject's last sequence, so the
    # operator's approval still lands.
    approved = await plane.nc.request("herd.api.v1.node.approve",
                                      json.dumps({"id": "n1", "reason": "checked"}).encode(),
                                      timeout=10)
    assert json.loads(approved.data)["ok"], approved.data
    assert projector.nodes["n1"].approval is Approval.APPROVED


async def test_an_agent_cannot_report_on_another_nodes_allocation_by_its_id(
        plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
    """The allocation's own node is the one its placement named: n1 declaring n2's
    allocation lost (on n1's subject, body naming n1) changes nothing."""
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    store_js = plane.nc.jetstream()
    placed = AllocPlaced(node_id="n2", alloc_id="real", job_id="j", eval_id="e", index=0,
                         command=["sleep", "30"])
    ack = await store_js.publish("herd.alloc.n2.real.placed", encode(placed))
    await projector.wait_applied(ack.seq, timeout=10)
    attacker = await connect_as(plane, await issue(tmp_path, "agent", "n1"), [])
    try:
        ack = await attacker.jetstream().publish(
            "herd.alloc.n1.real.lost", encode(AllocLost(node_id="n1", alloc_id="real")))
    finally:
        await attacker.close()
    await projector.wait_applied(ack.seq, timeout=10)
    assert projector.allocs["real"].node_id == "n2"
    assert not projector.allocs["real"].terminal


async def _true(value: bool) -> bool:
    return value


async def test_ids_a_terminal_or_a_log_would_choke_on_are_dead_lettered_quietly(
        plane: ControlPlane, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """Without --auth anyone may publish anything: an id holding ANSI escapes (on its own
    matching subject) or 200 KB long, and a 50k-deep body, reach no view and cost one
    short log line, however many arrive."""
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    js = plane.nc.jetstream()
    ansi, huge = "n\x1b[31mred", "x" * 200_000
    bodies = [(f"herd.node.{ansi}.registered", encode(NodeRegistered(node_id=ansi)))] * 50
    bodies += [("herd.node.n9.registered", encode(NodeRegistered(node_id=huge)))] * 50
    bodies += [("herd.node.n9.registered",
                b'{"type":"node.registered","node_id":"n9","x":' + b"[" * 50_000
                + b"]" * 50_000 + b"}")] * 5
    before = projector.deadletters
    caplog.clear()
    seq = 0
    for subject, data in bodies:
        seq = (await js.publish(subject, data)).seq
    await projector.wait_applied(seq, timeout=30)
    assert projector.deadletters - before == len(bodies)
    assert ansi not in projector.nodes and huge not in projector.nodes
    assert "n9" not in projector.nodes
    lines = [r.getMessage() for r in caplog.records if r.name == "herdbook.projector.projection"]
    assert 1 <= len(lines) <= 5, len(lines)
    assert all(len(line) < 1000 and "\x1b" not in line for line in lines)
