"""History, time travel and the audit trail against a real nats-server: the hash chain
and a forged event, states before and after a transition by stored time, the cause
chain of a node killed by XID 79 (real projector, scheduler and allocation reactor),
and the commands through the real `herd` CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.alloc import AllocStatus
from herdbook.events.codec import encode
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeDrainStarted,
    NodeEvent,
    NodeRegistered,
)
from herdbook.events.states import Intent
from herdbook.events.store import EventStore, subject_of
from herdbook.health.policy import Verdict
from herdbook.history.queries import audit_list, node_history, nodes_at, verify
from herdbook.history.reader import read_log
from herdbook.reactors.health import decide_health
from tests.conftest import herd
from tests.integration.test_scheduler import Harness


async def append_all(store: EventStore, *events: NodeEvent) -> int:
    seq = 0
    for event in events:
        seq = await store.append(event)
    return seq


def lifecycle_of(node_id: str) -> list[NodeEvent]:
    return [NodeRegistered(node_id=node_id, boot_id="b"),
            NodeApproved(node_id=node_id, actor="alice", reason="inventory checked"),
            NodeBootChecked(node_id=node_id, boot_id="b", passed=True),
            NodeCordoned(node_id=node_id, actor="bob", reason="fan noise")]


async def forge(nc: Any, event: NodeEvent) -> int:
    """A raw publish around EventStore: whatever prev_hash the forger wrote."""
    ack = await nc.jetstream().publish(subject_of(event), encode(event))
    return int(ack.seq)


async def test_the_hash_chain_verifies_and_names_a_forged_event(nc: Any) -> None:
    store = EventStore(nc)
    await append_all(store, *lifecycle_of("gpu-1"), *lifecycle_of("gpu-2"))
    js = nc.jetstream()
    assert await verify(js) == {"ok": True, "nodes_checked": 2, "events_checked": 8,
                                "broken": [], "refused": [], "refused_total": 0,
                                "unanchored": [], "unanchored_total": 0}

    last = (await read_log(js, "herd.node.gpu-1.>"))[-1]
    forged_seq = await forge(nc, NodeDrainStarted(node_id="gpu-1", prev_hash="0" * 64,
                                                  reason="not me"))
    # a later honest append chains onto the forged event: only the first break is named
    await store.append(NodeApproved(node_id="gpu-1"))
    await forge(nc, NodeCordoned(node_id="gpu-2"))      # no prev_hash at all
    report = await verify(js)
    assert report["ok"] is False
    assert report["events_checked"] == 11
    assert report["broken"][0] == {
        "node_id": "gpu-1", "seq": forged_seq, "event": "node.drain_started",
        "expected": hashlib.sha256(last.data).hexdigest(), "found": "0" * 64}
    assert [(b["node_id"], b["found"]) for b in report["broken"][1:]] == [("gpu-2", None)]
    assert (await verify(js, "gpu-2"))["nodes_checked"] == 1


async def test_time_travel_shows_the_state_before_and_after_a_transition(nc: Any) -> None:
    store = EventStore(nc)
    await append_all(store, *lifecycle_of("gpu-1")[:3])
    await asyncio.sleep(1.0)
    between = datetime.now(UTC)
    await asyncio.sleep(1.0)
    await store.append(lifecycle_of("gpu-1")[3])
    js = nc.jetstream()

    before, seq_before = await nodes_at(js, between)
    after, seq_after = await nodes_at(js, datetime.now(UTC))
    assert before["gpu-1"].intent is Intent.ELIGIBLE and before["gpu-1"].state == "READY"
    assert after["gpu-1"].intent is Intent.CORDONED and after["gpu-1"].state == "CORDONED"
    assert (seq_before, seq_after) == (3, 4)

    audit, total = await audit_list(js, "gpu-1", since=between)
    assert [(r["actor"], r["action"], r["reason"]) for r in audit] == [
        ("bob", "node.cordoned", "fan noise")]
    assert total == 1
    newest, total = await audit_list(js, "gpu-1", limit=2)
    assert [r["action"] for r in newest] == ["node.boot_checked", "node.cordoned"]
    assert total == 4



async def test_the_history_of_a_node_killed_by_xid_79_shows_the_whole_cause_chain(
        h: Harness) -> None:
    await h.add_node("n1", gpus=2)
    await h.start()
    await h.run_job(count=2, gpus=1)
    placed = await h.wait(lambda: len(h.allocs(node_id="n1")) == 2 and h.allocs(node_id="n1"),
                          what="two allocations on n1")
    await h.run_allocs(*placed)
    await h.add_node("n2", gpus=2)

    # as the classifier does with a report carrying XID 79
    view = h.projector.nodes["n1"]
    events, _ = decide_health(view, Verdict("fatal", ("fatal-xid: XID 79 on GPU 3",)), 0, 3,
                              report_id="r-79")
    await h.store.append_decided(events, view.version)
    await h.wait(lambda: len(h.allocs(node_id="n2")) == 2
                 and all(a.status is AllocStatus.LOST for a in h.allocs(node_id="n1")),
                 what="lost on n1 and placed again on n2")

    history = await node_history(h.store.js, "n1")
    assert [i["event"] for i in history["items"]] == [
        "node.registered", "node.approved", "node.boot_checked", "node.health_changed",
        "node.down"]
    classified, down = history["items"][3:]
    assert (classified["causation_id"], classified["caused_by"]) == (
        "r-79", "health report r-79 (XID 79)")
    assert down["causation_id"] == classified["event_id"]
    assert sorted(c["event"] for c in down["caused"]) == [
        "alloc.lost", "alloc.lost", "alloc.placed", "alloc.placed", "eval.created"]
    assert history["chains"] == [{"root": "health report r-79 (XID 79)", "lines": [
        "health report r-79 (XID 79)",
        "  → node.health_changed (fatal)",
        "    → node.down",
        "      → alloc.lost ×2",
        "      → eval.created node-update",
        "        → alloc.placed ×2 on n2",
    ]}]


async def test_the_commands_through_the_real_cli(nc: Any, nats_server: Any,
                                                 tmp_path: Path) -> None:
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp-h\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        store = EventStore(nc)
        await append_all(store, *lifecycle_of("gpu-1")[:3])
        await asyncio.sleep(1.0)
        between = datetime.now(UTC).isoformat()
        await asyncio.sleep(1.0)
        await store.append(lifecycle_of("gpu-1")[3])

        async def cli(*args: str) -> Any:
            return await asyncio.to_thread(herd, *args, server=nats_server.url)

        shown = await cli("node", "history", "gpu-1")
        assert shown.returncode == 0, shown.stderr
        assert "node.cordoned" in shown.stdout and "fan noise" in shown.stdout
        as_json = json.loads((await cli("node", "history", "gpu", "-o", "json")).stdout)
        assert [i["event"] for i in as_json["items"]][-1] == "node.cordoned"

        then = json.loads((await cli("node", "describe", "gpu-1", "--at", between,
                                     "-o", "json")).stdout)
        now = json.loads((await cli("node", "describe", "gpu-1", "--at", "0s",
                                    "-o", "json")).stdout)
        assert (then["state"], now["state"]) == ("READY", "CORDONED")
        assert then["heartbeating"] is None and then["last_heartbeat"] is None
        listed = json.loads((await cli("node", "list", "--at", between, "-o", "json")).stdout)
        assert {n["id"]: n["state"] for n in listed}.get("gpu-1") == "READY"
        unborn = await cli("node", "describe", "gpu-1", "--at", "1d")
        assert unborn.returncode == 1 and "gpu-1 did not exist at" in unborn.stderr
        bad = await cli("node", "list", "--at", "last tuesday")
        assert bad.returncode == 2 and bad.stderr.startswith("Error: --at: invalid time")

        audit = await cli("audit", "list", "--node", "gpu-1", "-o", "json")
        assert [(r["actor"], r["action"]) for r in json.loads(audit.stdout)][-2:] == [
            ("system", "node.boot_checked"), ("bob", "node.cordoned")]

        ok = await cli("audit", "verify")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("OK: ") and "events of 2 nodes verified" in ok.stdout
        seq = await forge(nc, replace(lifecycle_of("gpu-1")[3], prev_hash="f" * 64))
        broken = await cli("audit", "verify", "--node", "gpu-1")
        assert broken.returncode == 1
        assert broken.stdout.startswith(
            f"BROKEN: node gpu-1 at seq {seq} (event node.cordoned): prev_hash {'f' * 64}")
    finally:
        await plane.stop()
