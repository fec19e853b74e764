"""Issue 26 item 4: one forged body cannot spoil the audit for ever. Under `herd up --auth`
an agent's stolen credentials store an undecodable body, a body of another type and a
50k-deep body on the agent's own subjects (NATS stores them; the projector dead-letters
them). `herd audit verify` then says OK and lists them as refused with their sequences
and reasons; `herd events tail` shows them as refused, not as the events they claim to
be, and survives the deep one. A vouched event that vanished still breaks the chain."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from herdbook.control.plane import ControlPlane
from herdbook.events.codec import encode
from herdbook.events.node import NodeApproved, NodeCordoned, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.events.streams import events_stream
from herdbook.history.queries import verify
from tests.conftest import herd
from tests.integration.test_auth import connect_as, issue, plane  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(180)

DEEP = (b'{"type":"node.boot_started","node_id":"n1","x":' + b"[" * 50_000
        + b"]" * 50_000 + b"}")


async def test_refused_bodies_are_listed_and_break_no_chain_nor_the_tail(
        plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
    projector = plane.projector
    assert projector is not None and plane.nc is not None
    agent_creds = await issue(tmp_path, "agent", "n1")
    operator = await issue(tmp_path, "operator", "alice")
    agent = await connect_as(plane, agent_creds, [])
    try:
        # the agent registers as it does (chained through the store, by subject)
        store = EventStore(agent, direct=True)
        await store.append(NodeRegistered(node_id="n1", boot_id="b"))
        # ...then, with the same credentials, stores what no reader vouches for
        js = agent.jetstream()
        forged = [
            ("herd.node.n1.registered", encode(NodeApproved(node_id="n1", actor="admin",
                                                            reason="self-approved"))),
            ("herd.node.n1.info_updated", b"not json at all"),
            ("herd.node.n1.boot_started", DEEP),
        ]
        seqs = [int((await js.publish(subject, data)).seq) for subject, data in forged]
    finally:
        await agent.close()
    await projector.wait_applied(seqs[-1], timeout=30)

    async def cli(*args: str) -> Any:
        return await asyncio.to_thread(herd, "--creds", str(operator), *args, timeout=60)

    # an operator's command lands after them: chained onto the deep body
    cordoned = await cli("node", "cordon", "n1", "-m", "checking")
    assert cordoned.returncode == 0, cordoned.stderr

    verified = await cli("audit", "verify")
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    lines = verified.stdout.splitlines()
    assert lines[0].startswith("OK: ") and lines[0].endswith(
        "nodes verified; 3 refused messages not part of the chain"), lines
    refused = lines[1:]    # the cordon chained past them, onto the registration: nothing
                           # is left unanchored
    assert [line.split(" on ")[0] for line in refused] == [f"REFUSED: seq {s}" for s in seqs]
    assert "node.approved for herd.node.n1.approved" in refused[0]
    assert "undecodable" in refused[1] and "undecodable" in refused[2]
    report = json.loads((await cli("audit", "verify", "--node", "n1", "-o", "json")).stdout)
    assert (report["ok"], report["broken"], report["refused_total"]) == (True, [], 3)
    assert [(r["seq"], r["subject"]) for r in report["refused"]] == [
        (s, subject) for s, (subject, _) in zip(seqs, forged, strict=True)]

    tail = await cli("events", "tail")
    assert tail.returncode == 0, tail.stderr
    assert "Traceback" not in tail.stderr
    rows = {int(line.split()[0]): line for line in tail.stdout.splitlines()[1:]}
    for seq in seqs:
        assert rows[seq].split()[1] == "refused", rows[seq]   # no stored time: no TIME
    assert "node.approved" not in rows[seqs[0]].split("refused:")[0]
    assert "admin" not in rows[seqs[0]].split("refused:")[0]
    as_json = [json.loads(line) for line in
               (await cli("events", "tail", "-o", "json")).stdout.splitlines()]
    by_seq = {row["seq"]: row for row in as_json}
    assert {by_seq[s]["type"] for s in seqs} == {"refused"}
    assert "actor" not in by_seq[seqs[0]] and by_seq[seqs[0]]["refused"]
    assert [r["type"] for r in as_json if r["subject"].startswith("herd.node.n1.")
            and r["seq"] not in seqs] == ["node.registered", "node.cordoned"]
    as_yaml = await cli("events", "tail", "-o", "yaml", "--subject", "herd.node.n1.>")
    assert as_yaml.returncode == 0, as_yaml.stderr
    assert [d["type"] for d in yaml.safe_load_all(as_yaml.stdout)] == [
        "node.registered", "refused", "refused", "refused", "node.cordoned"]


async def test_a_vouched_event_that_vanished_still_breaks_the_chain(
        nats_server: Any) -> None:
    """HERD_EVENTS denies delete; a copy that allows it stands for a store tampered with
    on disk. A refused message in the chain is no break; a vouched event taken out is."""
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(replace_config(events_stream()))
        store = EventStore(nc)
        registered = await store.append(NodeRegistered(node_id="n1", boot_id="b"))
        refused_seq = int((await js.publish("herd.node.n1.info_updated", b"{")).seq)
        approved = await store.append(NodeApproved(node_id="n1", actor="alice"))
        cordoned = await store.append(NodeCordoned(node_id="n1", actor="bob"))
        await store.append(NodeApproved(node_id="n1", reason="after"))
        intact = await verify(js)
        assert (intact["ok"], intact["events_checked"], intact["refused_total"]) == (True, 4, 1)
        assert intact["refused"][0]["seq"] == refused_seq

        await js.delete_msg("HERD_EVENTS", cordoned)
        gone = await verify(js)
        assert gone["ok"] is False
        assert [(b["node_id"], b["seq"]) for b in gone["broken"]] == [("n1", cordoned + 1)]
        assert approved < cordoned
        # a vouched event changed: the next one's link names it
        assert gone["broken"][0]["expected"] != gone["broken"][0]["found"]
        # the registration, directly followed by the refused message, vanished: the
        # approval chained past that message onto it, so the chain breaks there too
        await js.delete_msg("HERD_EVENTS", registered)
        assert [(b["seq"], b["event"]) for b in (await verify(js))["broken"]] == [
            (approved, "node.approved")]
    finally:
        await nc.close()


def replace_config(config: Any) -> Any:
    """The events stream as herdbook makes it, but deletes allowed."""
    config.deny_delete = False
    return config
