"""Pure deciders: liveness (clock passed in), heartbeat ordering, membership commands."""

from __future__ import annotations

import msgspec
import pytest

from herdbook.events.node import NodeApproved, NodeDegraded, NodeDown, NodeRecovered
from herdbook.events.states import Approval, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors.heartbeats import NodeBeat, is_newer
from herdbook.reactors.liveness import (
    ACTOR,
    Observation,
    Timeouts,
    decide,
    decide_on_age,
    decide_on_heartbeat,
    next_deadline,
)
from herdbook.reactors.membership import (
    AUTO_APPROVE_ACTOR,
    decide_approve,
    decide_auto_approve,
    decide_delete,
    decide_reject,
)
from herdbook.reactors.refused import AlreadyDone, CommandRefused

TIMEOUTS = Timeouts(heartbeat_timeout=30, grace_period=60)


def node(lifecycle: Lifecycle = Lifecycle.READY, approval: Approval = Approval.APPROVED,
         node_type: NodeType = NodeType.COMPUTE, version: int = 12) -> NodeView:
    return NodeView(id="gpu-017", type=node_type, approval=approval, lifecycle=lifecycle,
                    version=version)


# liveness: on age -----------------------------------------------------------------


@pytest.mark.parametrize("age", [0.0, 10.0, 29.9, 29.999])
def test_ready_node_younger_than_the_timeout_gives_nothing(age: float) -> None:
    assert decide_on_age(node(Lifecycle.READY), age, TIMEOUTS) == []


@pytest.mark.parametrize("age", [30.0, 30.1, 89.0, 90.0, 5000.0])
def test_ready_node_at_the_timeout_degrades(age: float) -> None:
    # given a READY node, when its heartbeat is `age` seconds old
    events = decide_on_age(node(Lifecycle.READY), age, TIMEOUTS)
    # then one NodeDegraded, never a jump straight to DOWN
    assert len(events) == 1
    [event] = events
    assert isinstance(event, NodeDegraded)
    assert event.node_id == "gpu-017"
    assert event.actor == ACTOR
    assert event.heartbeat_age == pytest.approx(age)
    assert f"{age:.1f}s" in event.reason


@pytest.mark.parametrize("age", [30.0, 60.0, 89.0, 89.99])
def test_degraded_node_within_grace_gives_nothing(age: float) -> None:
    assert decide_on_age(node(Lifecycle.DEGRADED), age, TIMEOUTS) == []


@pytest.mark.parametrize("age", [90.0, 90.5, 3600.0])
def test_degraded_node_past_grace_goes_down(age: float) -> None:
    [event] = decide_on_age(node(Lifecycle.DEGRADED), age, TIMEOUTS)
    assert isinstance(event, NodeDown)
    assert event.actor == ACTOR
    assert event.heartbeat_age == pytest.approx(age)
    assert "grace period 60s expired" in event.reason


@pytest.mark.parametrize("lifecycle", [Lifecycle.DOWN, Lifecycle.UNKNOWN, Lifecycle.BOOTING,
                                       Lifecycle.FAILED, Lifecycle.QUARANTINED,
                                       Lifecycle.TERMINATED])
def test_other_lifecycles_are_left_alone_by_age(lifecycle: Lifecycle) -> None:
    assert decide_on_age(node(lifecycle), 10_000.0, TIMEOUTS) == []
    assert next_deadline(node(lifecycle), 100.0, TIMEOUTS) is None


def test_the_grace_period_comes_from_the_timeouts() -> None:
    borrowed = Timeouts(heartbeat_timeout=30, grace_period=30)
    assert decide_on_age(node(Lifecycle.DEGRADED), 59.9, borrowed) == []
    [event] = decide_on_age(node(Lifecycle.DEGRADED), 60.0, borrowed)
    assert isinstance(event, NodeDown)


# liveness: on heartbeat ----------------------------------------------------------


def test_degraded_node_that_heartbeats_recovers() -> None:
    [event] = decide_on_heartbeat(node(Lifecycle.DEGRADED))
    assert isinstance(event, NodeRecovered)
    assert event.node_id == "gpu-017"
    assert event.actor == ACTOR


@pytest.mark.parametrize("lifecycle", [Lifecycle.DOWN, Lifecycle.READY, Lifecycle.BOOTING,
                                       Lifecycle.TERMINATED])
def test_a_heartbeat_does_not_revive_other_lifecycles(lifecycle: Lifecycle) -> None:
    # DESIGN §4: a DOWN node whose heartbeats resume stays DOWN
    assert decide_on_heartbeat(node(lifecycle)) == []


def test_a_heartbeat_of_a_new_boot_alone_does_not_revive_a_down_node() -> None:
    # a restarted agent goes through BOOTING by its own boot_started/boot_checked events
    view = msgspec.structs.replace(node(Lifecycle.DOWN), boot_id="boot-a")
    assert decide_on_heartbeat(view, "boot-b") == []


def test_a_healed_partition_stays_down_unless_configured() -> None:
    view = msgspec.structs.replace(node(Lifecycle.DOWN), boot_id="boot-a")
    assert decide_on_heartbeat(view, "boot-a") == []
    [event] = decide_on_heartbeat(view, "boot-a", recover_down_on_heartbeat=True)
    assert isinstance(event, NodeRecovered)


def test_liveness_events_carry_the_boot_of_the_last_heartbeat() -> None:
    [degraded] = decide_on_age(node(Lifecycle.READY), 31.0, TIMEOUTS, "boot-a")
    [down] = decide_on_age(node(Lifecycle.DEGRADED), 91.0, TIMEOUTS, "boot-a")
    assert isinstance(degraded, NodeDegraded) and degraded.boot_id == "boot-a"
    assert isinstance(down, NodeDown) and down.boot_id == "boot-a"


# liveness: observed silence -------------------------------------------------------


def test_a_node_is_declared_by_the_silence_observed_not_by_its_heartbeat_age() -> None:
    # given a READY node whose last heartbeat is 100s old, observed for 29.9s (a restart)
    stale = Observation(heartbeat_age=100.0, boot_id="b", silent_for=29.9)
    # then nothing; at 30s of observed silence, DEGRADED with that age
    assert decide(node(), stale, TIMEOUTS) == []
    [event] = decide(node(), Observation(heartbeat_age=100.0, boot_id="b", silent_for=30.0),
                     TIMEOUTS)
    assert isinstance(event, NodeDegraded) and event.heartbeat_age == 30.0


def test_an_old_heartbeat_observed_briefly_neither_recovers_nor_downs_a_degraded_node(
        ) -> None:
    # given a node DEGRADED before a restart, its last heartbeat 100s old, observed 5s
    seen = Observation(heartbeat_age=100.0, boot_id="b", silent_for=5.0)
    # then no RECOVERED (the heartbeat is not fresh) and no DOWN (the grace is observed)
    assert decide(node(Lifecycle.DEGRADED), seen, TIMEOUTS) == []
    assert [type(e) for e in decide(node(Lifecycle.DEGRADED),
                                    Observation(heartbeat_age=100.0, boot_id="b",
                                                silent_for=90.0), TIMEOUTS)] == [NodeDown]


# liveness: deadlines -------------------------------------------------------------


def test_next_deadline_of_a_ready_node_is_the_timeout() -> None:
    assert next_deadline(node(Lifecycle.READY), 1000.0, TIMEOUTS) == 1030.0


def test_next_deadline_of_a_degraded_node_is_the_end_of_grace() -> None:
    assert next_deadline(node(Lifecycle.DEGRADED), 1000.0, TIMEOUTS) == 1090.0


def test_at_the_deadline_the_decider_acts() -> None:
    # the deadline and decide_on_age agree, on the same clock
    for lifecycle in (Lifecycle.READY, Lifecycle.DEGRADED):
        view = node(lifecycle)
        deadline = next_deadline(view, 500.0, TIMEOUTS)
        assert deadline is not None
        assert decide_on_age(view, deadline - 500.0, TIMEOUTS)
        assert not decide_on_age(view, deadline - 500.0 - 0.01, TIMEOUTS)


# heartbeat ordering ---------------------------------------------------------------


def beat(boot_id: str = "boot-a", seq: int = 100, recent: list[str] | None = None) -> NodeBeat:
    return NodeBeat(last_seen=0.0, boot_id=boot_id, seq=seq, recent_boots=recent or [])


def test_the_first_heartbeat_is_accepted() -> None:
    assert is_newer(None, "boot-a", 1)
    assert is_newer(None, "boot-a", 0)


@pytest.mark.parametrize("seq", [100, 99, 1, 0])
def test_replayed_or_equal_seq_of_the_same_boot_is_dropped(seq: int) -> None:
    assert not is_newer(beat(seq=100), "boot-a", seq)


def test_higher_seq_of_the_same_boot_is_accepted() -> None:
    assert is_newer(beat(seq=100), "boot-a", 101)


def test_new_boot_with_higher_seq_is_accepted() -> None:
    # seq is persisted by the agent, so it normally grows across restarts
    assert is_newer(beat(seq=100), "boot-b", 101)


def test_new_boot_with_lower_seq_is_accepted_once() -> None:
    # given boot-a at seq 100, when boot-b starts again at 1 (state dir wiped)
    last = beat(seq=100)
    assert is_newer(last, "boot-b", 1)
    # then, once accepted (as the sweeper records it), the same beat is a replay
    accepted = NodeBeat(last_seen=1.0, boot_id="boot-b", seq=1, recent_boots=["boot-a"])
    assert not is_newer(accepted, "boot-b", 1)
    assert is_newer(accepted, "boot-b", 2)


def test_old_boot_in_recent_boots_is_refused() -> None:
    # given boot-b took over from boot-a at a higher seq
    last = beat(boot_id="boot-b", seq=150, recent=["boot-a"])
    # when a late heartbeat of boot-a arrives, then it is refused
    assert not is_newer(last, "boot-a", 100)
    assert not is_newer(last, "boot-a", 1)


def test_old_boot_replay_after_a_wiped_reboot_is_refused() -> None:
    # given boot-b restarted from a wiped state dir and is at seq 2
    last = beat(boot_id="boot-b", seq=2, recent=["boot-a"])
    # when a replayed heartbeat of boot-a at its old seq 100 arrives
    # then it is refused (docstring: "a replay of an old one not")
    assert not is_newer(last, "boot-a", 100)


# membership -----------------------------------------------------------------------


def test_approve_a_pending_node() -> None:
    event = decide_approve(node(approval=Approval.PENDING), "alice", "racked")
    assert isinstance(event, NodeApproved)
    assert (event.node_id, event.actor, event.reason) == ("gpu-017", "alice", "racked")


def test_approve_a_rejected_node() -> None:
    assert isinstance(decide_approve(node(approval=Approval.REJECTED), "alice"), NodeApproved)


def test_approving_an_approved_node_is_already_done() -> None:
    with pytest.raises(AlreadyDone, match=r"^node gpu-\d+ already approved$"):
        decide_approve(node(approval=Approval.APPROVED), "alice")


@pytest.mark.parametrize("approval", [Approval.PENDING, Approval.APPROVED])
def test_reject_a_compute_node(approval: Approval) -> None:
    event = decide_reject(node(approval=approval), "bob", "unknown host")
    assert event.event_name == "rejected"
    assert (event.actor, event.reason) == ("bob", "unknown host")


def test_rejecting_a_rejected_node_is_already_done() -> None:
    with pytest.raises(AlreadyDone, match=r"^node gpu-\d+ already rejected$"):
        decide_reject(node(approval=Approval.REJECTED), "bob")


def test_rejecting_a_requester_node_is_refused() -> None:
    with pytest.raises(CommandRefused, match="requester"):
        decide_reject(node(node_type=NodeType.REQUESTER), "bob")


@pytest.mark.parametrize("approval", list(Approval))
def test_delete_is_always_allowed(approval: Approval) -> None:
    event = decide_delete(node(approval=approval), "carol", "gone")
    assert (event.event_name, event.node_id, event.actor) == ("deleted", "gpu-017", "carol")


def test_auto_approve_approves_a_pending_node_when_enabled() -> None:
    [event] = decide_auto_approve(node(approval=Approval.PENDING), auto_approve=True)
    assert isinstance(event, NodeApproved)
    assert event.actor == AUTO_APPROVE_ACTOR


@pytest.mark.parametrize("approval", [Approval.APPROVED, Approval.REJECTED])
def test_auto_approve_leaves_decided_nodes_alone(approval: Approval) -> None:
    assert decide_auto_approve(node(approval=approval), auto_approve=True) == []


@pytest.mark.parametrize("approval", list(Approval))
def test_auto_approve_does_nothing_when_disabled(approval: Approval) -> None:
    assert decide_auto_approve(node(approval=approval), auto_approve=False) == []

