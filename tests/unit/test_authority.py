"""The subject-family table (events.authority): every event belongs to one family, the
binding refuses any body its subject does not vouch for, and the agents' NATS
permissions are the table's agent subjects."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from herdbook.events.alloc import AllocLost, AllocPlaced, AllocRunning
from herdbook.events.authority import (
    FAMILIES,
    Publisher,
    Unvouched,
    agent_publish_subjects,
    bind_event,
    family_of,
    publishers,
)
from herdbook.events.codec import EVENT_TYPES, encode
from herdbook.events.eval_events import EvalCreated
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.node import NodeApproved, NodeBootStarted, NodeRegistered
from herdbook.events.store import subject_of
from herdbook.natsd.users import agent_permissions

ids = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


def test_every_event_type_belongs_to_exactly_one_family_and_has_a_publisher() -> None:
    for cls in EVENT_TYPES:
        owners = [f for f in FAMILIES if f.carries_events and issubclass(cls, f.base)]
        assert len(owners) == 1, cls
        assert Publisher.CONTROL in publishers(cls)


def test_only_the_agents_own_reports_are_agent_writable() -> None:
    assert publishers(NodeRegistered) == {Publisher.AGENT, Publisher.CONTROL}
    assert publishers(NodeBootStarted) == {Publisher.AGENT, Publisher.CONTROL}
    assert publishers(AllocRunning) == {Publisher.AGENT, Publisher.CONTROL}
    for cls in (NodeApproved, AllocPlaced, EvalCreated):
        assert publishers(cls) == {Publisher.CONTROL}


def test_agent_permissions_are_generated_from_the_table() -> None:
    perms = agent_permissions("n1")["publish"]["allow"]
    table = agent_publish_subjects("n1")
    assert set(table) <= set(perms)
    assert [p for p in perms if p.startswith("herd.") and p not in table] == [
        "herd.agent.n1.holder", "herd.sync.n1.allocs"]
    assert "herd.node.n1.approved" not in table and "herd.alloc.n1.*.placed" not in table


def test_an_event_on_its_own_subject_binds() -> None:
    event = AllocRunning(node_id="n1", alloc_id="a1", pid=7)
    assert bind_event(subject_of(event), encode(event)) == event


@pytest.mark.parametrize(("subject", "event", "reason"), [
    ("herd.node.n1.registered", NodeApproved(node_id="n1"), "not for its subject"),
    ("herd.node.n1.approved", NodeApproved(node_id="n2"), "herd.node.n2.approved"),
    ("herd.alloc.n1.a1.running", NodeApproved(node_id="n1"), "may not carry node.approved"),
    ("herd.alloc.n1.a1.placed", AllocPlaced(node_id="n3", alloc_id="a1", job_id="j",
                                            eval_id="e", index=0, command=["x"]),
     "herd.alloc.n3.a1.placed"),
    ("herd.eval.e1.created", EvalCreated(eval_id="e1", job_id="bad id",
                                         triggered_by=Trigger.JOB_REGISTER), "invalid job id"),
    ("herd.hb.n1", NodeApproved(node_id="n1"), "carries no domain events"),
    ("herd.alloc.n1.a1.lost", AllocLost(node_id="n1", alloc_id="a\x1b[31m"), "invalid alloc id"),
])
def test_a_body_its_subject_does_not_vouch_for_is_refused(subject: str, event: object,
                                                           reason: str) -> None:
    with pytest.raises(Unvouched, match=reason.replace("[", r"\[")):
        bind_event(subject, encode(event))


def test_garbage_and_deep_nesting_are_refused_not_raised() -> None:
    for data in (b"", b"{", b"[" * 50_000 + b"]" * 50_000,
                 b'{"type":"node.approved","node_id":"n1","x":' + b"[" * 50_000
                 + b"]" * 50_000 + b"}"):
        with pytest.raises(Unvouched, match="undecodable"):
            bind_event("herd.node.n1.approved", data)
    assert family_of("herd.node.n1.x") is not None and family_of("nats.x.y") is None


@given(ids, ids, st.sampled_from([NodeApproved, NodeRegistered, NodeBootStarted]))
def test_a_node_event_binds_only_to_its_own_nodes_subject(owner: str, other: str,
                                                          cls: type) -> None:
    event = cls(node_id=owner)
    subject = subject_of(event)
    assert bind_event(subject, encode(event)) == event
    if other != owner:
        with pytest.raises(Unvouched):
            bind_event(subject.replace(f".{owner}.", f".{other}.", 1), encode(event))


def test_the_expected_subject_is_the_one_the_store_appends_on() -> None:
    from herdbook.events.authority import expected_subject
    from herdbook.events.instance import InstanceRunning
    from herdbook.events.pool import PoolScaled
    for event in (NodeApproved(node_id="n1"), AllocRunning(node_id="n1", alloc_id="a", pid=1),
                  EvalCreated(eval_id="e", job_id="j", triggered_by=Trigger.JOB_REGISTER),
                  InstanceRunning(instance_id="i", node_id="n"), PoolScaled(pool="p", size=1)):
        assert expected_subject(event) == subject_of(event)


def test_ids_found_valid_are_remembered_within_a_bound_and_invalid_ones_never(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from herdbook.events import authority

    monkeypatch.setattr(authority, "_VALID_IDS", set())
    monkeypatch.setattr(authority, "_VALID_IDS_MAX", 3)
    for i in range(5):
        authority.check_ids(NodeApproved(node_id=f"n{i}"))
        assert f"n{i}" in authority._VALID_IDS and len(authority._VALID_IDS) <= 3
    for _ in range(2):   # refused every time, never remembered
        with pytest.raises(authority.Unvouched):
            authority.check_ids(NodeApproved(node_id="not an id"))
    assert "not an id" not in authority._VALID_IDS


_REMEMBERED_CASES = [   # (an event that binds, a body for the same subject, refused or not)
    (NodeApproved(node_id="n1"), NodeRegistered(node_id="n1"), "not for its subject"),
    (NodeApproved(node_id="n1"), NodeApproved(node_id="n2"), "herd.node.n2.approved"),
    (NodeRegistered(node_id="n1", boot_id="b1"), NodeRegistered(node_id="n1", boot_id="bad id"),
     "invalid boot id"),
    (AllocRunning(node_id="n1", alloc_id="a1", pid=1), AllocRunning(node_id="n1", alloc_id="a2", pid=1),
     "herd.alloc.n1.a2.running"),
    (AllocRunning(node_id="n1", alloc_id="a1", pid=1), AllocRunning(node_id="n2", alloc_id="a1", pid=1),
     "herd.alloc.n2.a1.running"),
    (NodeApproved(node_id="n1"), NodeApproved(node_id="n1", reason="again"), None),
]


@pytest.mark.parametrize(("first", "second", "reason"), _REMEMBERED_CASES)
def test_a_subject_bound_before_refuses_what_it_refused_when_new(first: object, second: object,
                                                                 reason: str | None) -> None:
    """A subject's earlier binding is remembered (``_BOUND``): the next body on it is
    accepted or refused, with the same reason, exactly as on a subject never seen."""
    from herdbook.events import authority

    subject = subject_of(first)   # type: ignore[arg-type]
    outcomes: list[object] = []
    for remembered in (False, True):
        authority._BOUND.clear()
        if remembered:
            bind_event(subject, encode(first))
            assert subject in authority._BOUND
        try:
            outcomes.append(bind_event(subject, encode(second)))
        except Unvouched as err:
            outcomes.append(str(err))
    assert outcomes[0] == outcomes[1]
    if reason is None:
        assert outcomes[1] == second
    else:
        assert isinstance(outcomes[1], str) and reason in outcomes[1]


@given(st.lists(st.tuples(st.sampled_from(["n1", "n2", "bad id"]), st.sampled_from(["a1", "a2"]),
                          st.sampled_from(["n1", "n2"]), st.sampled_from(["b", "bad id", ""]),
                          st.integers(0, 3)), min_size=1, max_size=12))
def test_remembered_bindings_decide_as_the_full_checks_for_any_history(
        steps: list[tuple[str, str, str, str, int]]) -> None:
    """Bodies naming any node (valid or not) on the subjects of n1/n2: every outcome with
    the bindings remembered equals the outcome with none remembered."""
    from herdbook.events import authority

    authority._BOUND.clear()
    for body_node, alloc, subject_node, boot, kind in steps:
        event = (NodeApproved(node_id=body_node) if kind == 0 else
                 NodeRegistered(node_id=body_node, boot_id=boot) if kind == 1 else
                 AllocRunning(node_id=body_node, alloc_id=alloc, pid=1) if kind == 2 else
                 AllocLost(node_id=body_node, alloc_id=alloc))
        subject = (f"herd.node.{subject_node}.{'approved' if kind == 0 else 'registered'}"
                   if kind < 2 else f"herd.alloc.{subject_node}.{alloc}."
                   f"{'running' if kind == 2 else 'lost'}")
        outcomes: list[object] = []
        for fresh in (False, True):
            saved = dict(authority._BOUND)
            if fresh:
                authority._BOUND.clear()
            try:
                outcomes.append(bind_event(subject, encode(event)))
            except Unvouched as err:
                outcomes.append(str(err))
            if fresh:
                authority._BOUND.update(saved)
        assert outcomes[0] == outcomes[1], (subject, event)


def test_a_remembered_binding_skips_the_subject_checks(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The second event on a subject is bound by the remembered type and ids (what makes
    a rebuild ~3x cheaper per event here), and the memory is bounded."""
    from herdbook.events import authority

    authority._BOUND.clear()
    event = NodeApproved(node_id="n1")
    bind_event("herd.node.n1.approved", encode(event))

    def no(*_: object) -> str:
        raise AssertionError("the full checks ran again")

    monkeypatch.setattr(authority, "expected_subject", no)
    again = NodeApproved(node_id="n1", reason="x")
    assert bind_event("herd.node.n1.approved", encode(again)) == again
    monkeypatch.undo()
    monkeypatch.setattr(authority, "_BOUND_MAX", 2)
    authority._BOUND.clear()
    for i in range(5):
        bind_event(f"herd.node.n{i}.approved", encode(NodeApproved(node_id=f"n{i}")))
        assert len(authority._BOUND) <= 2
