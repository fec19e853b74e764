"""History, time travel and the audit trail: the pure pieces, no server."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from msgspec.structs import replace

from herdbook.api.history_messages import (
    AuditPage,
    ChainReport,
    NodeHistory,
    NodeHistoryReply,
    NodesAt,
)
from herdbook.api.history_routes import fitting, node_at_json
from herdbook.events.alloc import AllocLost, AllocPlaced, AllocRequeueApproved, AllocRunning
from herdbook.events.base import Event
from herdbook.events.codec import encode
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeInfo,
    NodeInfoUpdated,
    NodeRegistered,
    NodeWipeStepReported,
)
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.events.subjects import event_subject
from herdbook.health.policy import Verdict
from herdbook.history.audit import MAX_REFUSED, ChainVerifier, audit_row, is_audited
from herdbook.history.causes import CauseIndex, build_history, is_nodes
from herdbook.history.reader import LogEntry, entry_of
from herdbook.history.times import parse_time
from herdbook.projector.as_of import fold_nodes
from herdbook.projector.eval_view import spawn
from herdbook.projector.node_view import NodeView
from herdbook.reactors.health import decide_health

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def log(*events: Event, step: timedelta = timedelta(seconds=1)) -> list[LogEntry]:
    """The events as stored: sequences from 1, one second apart."""
    return [LogEntry(seq, T0 + step * seq, event_subject(type(e).aggregate, e.aggregate_id,
                                                         e.event_name), encode(e), e)  # type: ignore[arg-type]
            for seq, e in enumerate(events, start=1)]


# -- TIME ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-21T10:00:00Z", datetime(2026, 11, 21, 10, 0, tzinfo=UTC)),
    ("2026-11-21T12:00:00+02:00", datetime(2026, 11, 21, 10, 0, tzinfo=UTC)),
    ("2026-11-21T10:00:00", datetime(2026, 11, 21, 10, 0, tzinfo=UTC)),
    ("2026-11-21", datetime(2026, 11, 21, tzinfo=UTC)),
    ("10m", T0 - timedelta(minutes=10)),
    ("2h", T0 - timedelta(hours=2)),
    (" 1d ", T0 - timedelta(days=1)),
    ("30", T0 - timedelta(seconds=30)),
])
def test_time_is_iso_or_a_duration_ago(text: str, expected: datetime) -> None:
    assert parse_time(text, T0) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "10 minutes", "-5m", "2026-13-01"])
def test_a_bad_time_says_how_to_write_one(text: str) -> None:
    with pytest.raises(ValueError, match="ISO-8601 .* or a duration ago"):
        parse_time(text, T0)


# -- THE CAUSE CHAIN -----------------------------------------------------------------


def view(node_id: str) -> NodeView:
    return NodeView(id=node_id, type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=Health.HEALTHY)


def xid_79_log() -> tuple[list[LogEntry], dict[str, Event]]:
    """A job placed on n1; XID 79 on n1; its allocations lost and placed again on n2."""
    spec = JobSpec(id="train", command=["true"], count=2)
    registered = JobRegistered(job_id="train", spec=spec)
    [first] = spawn(None, Trigger.JOB_REGISTER, "e-1", "train")
    first = replace(first, causation_id=registered.event_id)
    placed = [AllocPlaced(node_id="n1", alloc_id=f"a{i}", job_id="train", eval_id="e-1",
                          index=i, command=["true"], causation_id="e-1") for i in (0, 1)]
    fatal = Verdict("fatal", ("fatal-xid: XID 79 on GPU 3",))
    [classified, down], _ = decide_health(view("n1"), fatal, 0, 3, report_id="r-79")
    lost = [AllocLost(node_id="n1", alloc_id=f"a{i}", causation_id=down.event_id)
            for i in (0, 1)]
    [update] = spawn(None, Trigger.NODE_UPDATE, "e-2", "train", node_id="n1")
    update = replace(update, causation_id=down.event_id)
    again = [AllocPlaced(node_id="n2", alloc_id=f"b{i}", job_id="train", eval_id="e-2",
                         index=i, command=["true"], causation_id="e-2") for i in (0, 1)]
    events: list[Event] = [
        NodeRegistered(node_id="n1"), NodeRegistered(node_id="n2"), registered, first,
        *placed, AllocRunning(node_id="n1", alloc_id="a0", pid=7), classified, down, *lost,
        update, *again, NodeCordoned(node_id="n2", reason="unrelated"),
        NodeCordoned(node_id="n1", reason="check the GPU")]
    return log(*events), {"classified": classified, "down": down}


def test_the_history_of_a_node_killed_by_xid_79_shows_the_whole_chain() -> None:
    entries, named = xid_79_log()
    history = build_history("n1", entries)
    assert [i["event"] for i in history["items"]] == [
        "node.registered", "node.health_changed", "node.down", "node.cordoned"]
    registered, classified, down, cordoned = history["items"]
    assert classified["caused_by"] == "health report r-79 (XID 79)"
    assert classified["causation_id"] == "r-79"
    assert down["caused_by"] == "node.health_changed (fatal)"
    assert [c["event"] for c in down["caused"]] == [
        "alloc.lost", "alloc.lost", "eval.created", "alloc.placed", "alloc.placed"]
    assert {c["on"] for c in down["caused"] if c["event"] == "alloc.placed"} == {"n2"}
    assert len(classified["caused"]) == 6          # down and everything down caused
    assert registered["caused"] == [] and registered["caused_by"] is None
    assert cordoned["caused_by"] is None
    assert history["chains"] == [{"root": "health report r-79 (XID 79)", "lines": [
        "health report r-79 (XID 79)",
        "  → node.health_changed (fatal)",
        "    → node.down",
        "      → alloc.lost ×2",
        "      → eval.created node-update",
        "        → alloc.placed ×2 on n2",
    ]}]
    assert down["event_id"] == named["down"].event_id


def test_the_other_node_sees_only_what_reached_it() -> None:
    entries, _ = xid_79_log()
    history = build_history("n2", entries)
    assert [i["event"] for i in history["items"]] == ["node.registered", "node.cordoned"]
    assert history["chains"] == []


def test_the_two_pass_selection_keeps_exactly_what_the_history_needs() -> None:
    """Pass one: the roots of the node's cause trees; pass two: their members only."""
    entries, _ = xid_79_log()
    index = CauseIndex()
    wanted = set()
    for entry in entries:
        assert entry.event is not None
        root = index.add(entry.event)
        if is_nodes(entry.event, "n1"):
            wanted.add(root)
    kept = [e for e in entries if e.event is not None and index.root(e.event) in wanted]
    assert build_history("n1", kept) == build_history("n1", entries)
    assert len(kept) < len(entries)
    assert not any(isinstance(e.event, JobRegistered | AllocRunning) for e in kept)


def test_an_unknown_cause_is_named_as_such_and_a_later_event_is_never_a_cause() -> None:
    early = NodeCordoned(node_id="n1", causation_id="gone")
    late = NodeApproved(node_id="n1")
    looped = NodeRegistered(node_id="n1", causation_id=late.event_id)
    history = build_history("n1", log(early, looped, late))
    assert history["items"][0]["caused_by"] == "gone (not in HERD_EVENTS)"
    assert history["items"][1]["caused_by"] == f"{late.event_id} (not in HERD_EVENTS)"
    assert history["items"][2]["caused"] == []


# -- TIME TRAVEL ---------------------------------------------------------------------


def test_the_fold_stops_at_the_time_and_knows_no_heartbeat() -> None:
    entries = log(NodeRegistered(node_id="n1"), NodeApproved(node_id="n1"),
                  NodeBootChecked(node_id="n1", passed=True),
                  NodeCordoned(node_id="n1", reason="maintenance"))
    before, seq = fold_nodes(entries, T0 + timedelta(seconds=3.5))
    after, last = fold_nodes(entries, T0 + timedelta(seconds=4))
    assert (before["n1"].intent, seq) == (Intent.ELIGIBLE, 3)
    assert (after["n1"].intent, last) == (Intent.CORDONED, 4)
    assert fold_nodes(entries, T0) == ({}, 0)
    shown = node_at_json(after["n1"])
    assert shown["state"] == "CORDONED" and shown["intent_reason"] == "maintenance"
    assert shown["last_heartbeat"] is None and shown["heartbeating"] is None
    assert shown["allocations"] is None


# -- AUDIT ---------------------------------------------------------------------------


@pytest.mark.parametrize(("event", "audited"), [
    (NodeCordoned(node_id="n1"), True),
    (NodeRegistered(node_id="n1"), True),
    (NodeInfoUpdated(node_id="n1", info=NodeInfo()), False),
    (NodeWipeStepReported(node_id="n1", step="disk", ok=True), False),
    (AllocLost(node_id="n1", alloc_id="a", requeue_allowed=False), True),
    (AllocLost(node_id="n1", alloc_id="a"), False),
    (AllocRunning(node_id="n1", alloc_id="a", pid=1), False),
    (AllocRequeueApproved(node_id="n1", alloc_id="a", actor="alice"), True),
    (JobRegistered(job_id="j", spec=JobSpec(id="j", command=["x"])), True),
    (JobDeregistered(job_id="j"), True),
    (spawn(None, Trigger.JOB_REGISTER, "e", "j")[0], False),
])
def test_the_audit_keeps_actions_and_drops_noise(event: Event, audited: bool) -> None:
    assert is_audited(event) is audited  # type: ignore[arg-type]


def test_an_audit_row_names_actor_action_node_and_reason() -> None:
    [cordon, lost, job, boot] = log(
        NodeCordoned(node_id="n1", actor="alice@ops", reason="bad fan"),
        AllocLost(node_id="n1", alloc_id="a7", requeue_allowed=False, reason="node down"),
        JobDeregistered(job_id="train", actor="bob", reason="done"),
        NodeBootChecked(node_id="n1", passed=False, checks={"gpu": "2 of 8 missing"}))
    assert audit_row(cordon) == {"seq": 1, "at": "2026-11-21T10:00:01Z", "actor": "alice@ops",
                                 "action": "node.cordoned", "node": "n1", "target": None,
                                 "reason": "bad fan", "event_id": cordon.event.event_id}  # type: ignore[union-attr]
    assert (audit_row(lost) or {})["target"] == "alloc a7"
    assert (audit_row(job) or {})["node"] is None
    assert (audit_row(job) or {})["target"] == "job train"
    assert (audit_row(boot) or {})["reason"] == "boot check failed: gpu: 2 of 8 missing"


def chained(*events: Event) -> list[LogEntry]:
    """Node events stored as EventStore.append chains them."""
    last: dict[str, str] = {}
    out: list[Event] = []
    for event in events:
        node_id = event.aggregate_id
        event = replace(event, prev_hash=last.get(node_id))
        last[node_id] = hashlib.sha256(encode(event)).hexdigest()
        out.append(event)
    return log(*out)


def verify(entries: list[LogEntry]) -> dict[str, Any]:
    verifier = ChainVerifier()
    for entry in entries:
        verifier.add(entry)
    return verifier.report()


def test_an_intact_chain_verifies_across_interleaved_nodes() -> None:
    entries = chained(NodeRegistered(node_id="n1"), NodeRegistered(node_id="n2"),
                      NodeApproved(node_id="n1"), NodeCordoned(node_id="n2"),
                      NodeCordoned(node_id="n1"))
    assert verify(entries) == {"ok": True, "nodes_checked": 2, "events_checked": 5,
                               "broken": [], "refused": [], "refused_total": 0,
                               "unanchored": [], "unanchored_total": 0}


def test_a_tampered_event_breaks_the_link_after_it() -> None:
    entries = chained(NodeRegistered(node_id="n1"), NodeCordoned(node_id="n1", reason="a"),
                      NodeApproved(node_id="n1"), NodeCordoned(node_id="n1", reason="b"))
    second = entries[1]
    forged = second.data.replace(b'"reason":"a"', b'"reason":"z"')
    assert forged != second.data
    entries[1] = second._replace(data=forged)
    report = verify(entries)
    assert report["ok"] is False
    assert report["broken"] == [{
        "node_id": "n1", "seq": 3, "event": "node.approved",
        "expected": hashlib.sha256(forged).hexdigest(),
        "found": hashlib.sha256(second.data).hexdigest()}]


def test_an_event_without_prev_hash_is_broken_and_only_the_first_is_named() -> None:
    entries = chained(NodeRegistered(node_id="n1"), NodeRegistered(node_id="n2"))
    unchained = log(NodeRegistered(node_id="n1"), NodeRegistered(node_id="n1"),
                    NodeApproved(node_id="n1"))[2]
    report = verify([*entries, unchained._replace(seq=3)])
    assert [(b["node_id"], b["seq"], b["event"], b["found"]) for b in report["broken"]] == [
        ("n1", 3, "node.approved", None)]
    first_only = verify([*entries, unchained._replace(seq=3), unchained._replace(seq=4)])
    assert [b["seq"] for b in first_only["broken"]] == [3]


FORGED = encode(NodeApproved(node_id="n1", actor="admin"))
DEEP = b'{"type":"node.info_updated","x":' + b"[" * 50_000 + b"]" * 50_000 + b"}"


def stored(*items: Event | tuple[str, bytes], past_refused: bool = True) -> list[LogEntry]:
    """Node events and raw messages (subject, bytes) at seq 1, 2, ..., each event chained
    onto the node's last vouched event, as the chain is defined; ``past_refused=False``:
    onto whatever was last on its node's subjects, refused or not (the store's rule
    before it read past refused messages)."""
    last: dict[str, str] = {}
    out: list[LogEntry] = []
    for seq, item in enumerate(items, 1):
        if isinstance(item, tuple):
            subject, data = item
            if not past_refused:
                last[subject.split(".")[2]] = hashlib.sha256(data).hexdigest()
        else:
            event = replace(item, prev_hash=last.get(item.aggregate_id))
            subject = event_subject("node", item.aggregate_id, event.event_name)
            data = encode(event)
            last[item.aggregate_id] = hashlib.sha256(data).hexdigest()
        out.append(entry_of(seq, T0, subject, data))
    return out


def test_a_refused_message_is_listed_and_breaks_no_chain() -> None:
    entries = stored(NodeRegistered(node_id="n1"), NodeRegistered(node_id="n2"),
                     ("herd.node.n1.registered", FORGED), ("herd.node.n1.info_updated", DEEP),
                     NodeApproved(node_id="n1"), NodeCordoned(node_id="n1"))
    assert [e.event is None for e in entries] == [False, False, True, True, False, False]
    report = verify(entries)
    assert (report["ok"], report["broken"], report["events_checked"]) == (True, [], 4)
    assert (report["refused_total"], report["unanchored"]) == (2, [])
    assert [(r["seq"], r["node_id"]) for r in report["refused"]] == [(3, "n1"), (4, "n1")]
    assert "node.approved for herd.node.n1.approved" in report["refused"][0]["reason"]
    assert report["refused"][1]["reason"].startswith("undecodable")

    changed = list(entries)       # the vouched approval, changed after it was stored
    changed[4] = entries[4]._replace(data=entries[4].data.replace(b'"n1"', b'"n1" '))
    assert [(b["seq"], b["event"]) for b in verify(changed)["broken"]] == [
        (6, "node.cordoned")]
    vanished = [e for e in entries if e.seq != 5]
    assert [b["seq"] for b in verify(vanished)["broken"]] == [6]
    # a refused message is never a link: taken out or put in, it breaks nothing
    assert verify([e for e in entries if e.seq != 4])["ok"] is True
    put_in = [*entries[:5], entry_of(9, T0, "herd.node.n1.wiped", b"{"), entries[5]]
    assert verify(put_in)["ok"] is True


def test_a_change_to_a_vouched_event_directly_followed_by_a_refused_message_is_seen() -> None:
    """Issue 26 item 4: the link of the event after the refused messages names the
    vouched event before them, so changing or removing that event breaks the chain
    wherever refused messages sit (it went unseen while events chained onto the refused
    bytes)."""
    entries = stored(NodeRegistered(node_id="n1"), NodeApproved(node_id="n1", reason="ok"),
                     ("herd.node.n1.registered", FORGED), ("herd.node.n1.info_updated", DEEP),
                     NodeCordoned(node_id="n1"))
    assert verify(entries)["ok"] is True
    approved = entries[1]
    changed = [*entries[:1], approved._replace(data=approved.data.replace(
        b'"reason":"ok"', b'"reason":"no"')), *entries[2:]]
    assert changed[1].data != approved.data and changed[1].event is not None
    report = verify(changed)
    assert report["ok"] is False
    assert report["broken"] == [{
        "node_id": "n1", "seq": 5, "event": "node.cordoned",
        "expected": hashlib.sha256(changed[1].data).hexdigest(),
        "found": hashlib.sha256(approved.data).hexdigest()}]
    vanished = verify([e for e in entries if e.seq != 2])
    assert [(b["seq"], b["event"]) for b in vanished["broken"]] == [(5, "node.cordoned")]


def test_a_log_chained_onto_refused_bytes_verifies_and_names_what_it_left_unanchored() -> None:
    """Events appended before the store read past refused messages chained onto them:
    still OK, but the vouched event before a refused message is anchored by nothing, so
    it is listed (a change to it is not seen) instead of passed over in silence."""
    items: list[Event | tuple[str, bytes]] = [
        NodeRegistered(node_id="n1"), NodeRegistered(node_id="n2"),
        ("herd.node.n1.registered", FORGED), ("herd.node.n1.info_updated", DEEP),
        NodeApproved(node_id="n1"), NodeCordoned(node_id="n1")]
    entries = stored(*items, past_refused=False)
    report = verify(entries)
    assert (report["ok"], report["broken"], report["refused_total"]) == (True, [], 2)
    assert (report["unanchored"], report["unanchored_total"]) == (
        [{"node_id": "n1", "seq": 1, "refused_seq": 3, "next_seq": 5}], 1)
    # what the old store chained onto is still part of its link
    assert [b["seq"] for b in verify([e for e in entries if e.seq != 4])["broken"]] == [5]
    # the same events chained past the refused ones anchor the registration
    assert verify(stored(*items))["unanchored"] == []


def test_refused_messages_are_counted_beyond_those_named() -> None:
    verifier = ChainVerifier()
    for seq in range(1, MAX_REFUSED + 11):
        verifier.add(entry_of(seq, T0, "herd.node.n1.info_updated", b"junk"))
    report = verifier.report()
    assert (report["ok"], report["refused_total"], len(report["refused"])) == (
        True, MAX_REFUSED + 10, MAX_REFUSED)


def test_a_reply_keeps_what_fits() -> None:
    items = [{"n": i, "pad": "x" * 100} for i in range(10)]
    assert fitting(items, 3) == items[:3]
    size = len(encode(items[0])) + 1
    assert len(fitting(items, 10, budget=3 * size)) == 3
    assert len(fitting(items, 10, budget=3 * size - 1)) == 2
    assert fitting(items, 10, budget=1) == items[:1]


def test_the_reader_binds_each_message_to_its_subject_and_keeps_a_dead_one_raw() -> None:
    [stored] = log(NodeCordoned(node_id="n1", reason="fan"))
    bound = entry_of(stored.seq, stored.stored_at, stored.subject, stored.data)
    assert bound == stored
    elsewhere = entry_of(2, T0, "herd.node.n2.cordoned", stored.data)
    garbage = entry_of(3, T0, stored.subject, b"not json")
    assert (elsewhere.event, elsewhere.data) == (None, stored.data)
    assert garbage.event is None and garbage.subject == stored.subject


def test_the_wire_carries_history_audit_and_chain_reports_unchanged() -> None:
    entries, _ = xid_79_log()
    history = {**build_history("n1", entries), "omitted": 0}
    page = {"items": [row for e in entries if (row := audit_row(e)) is not None], "omitted": 3}
    report = verify([*chained(NodeRegistered(node_id="n1")),
                     entry_of(2, T0, "herd.node.n1.approved", b"not json"),
                     *log(NodeApproved(node_id="n1"))])
    report = {**report, "unanchored": [{"node_id": "n1", "seq": 1, "refused_seq": 2,
                                        "next_seq": 3}], "unanchored_total": 1}
    for value, reply in ((history, NodeHistoryReply), (page, AuditPage), (report, ChainReport)):
        sent = msgspec.json.encode(msgspec.convert(value, reply))
        assert msgspec.json.decode(sent) == value
        assert msgspec.to_builtins(msgspec.json.decode(sent, type=reply)) == value
    assert report["broken"] and report["refused"] and page["items"] and history["chains"]


def test_each_read_route_takes_only_its_own_fields() -> None:
    at = msgspec.json.decode(b'{"at": "2026-11-21T10:00:00Z", "wide": false}', type=NodesAt)
    assert (at.at, at.wide) == (T0, False)
    with pytest.raises(msgspec.ValidationError, match="unknown field `wide`"):
        msgspec.json.decode(b'{"id": "n1", "wide": true}', type=NodeHistory)
