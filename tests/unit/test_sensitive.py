"""Sensitive nodes: claim/release/wipe deciders, the wipe in the fold, conformance drift."""

from __future__ import annotations

import pytest

from herdbook.events.node import (
    GpuInfo,
    NodeClaimed,
    NodeConformanceChanged,
    NodeDrainStarted,
    NodeInfo,
    NodeReleased,
    NodeWiped,
    NodeWipeFailed,
    NodeWipeStarted,
    NodeWipeStepReported,
)
from herdbook.events.states import Approval, Intent, Lifecycle, NodeClass, NodeType
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors import intents
from herdbook.reactors.liveness import Observation, Timeouts, decide, next_deadline
from herdbook.reactors.refused import AlreadyDone, CommandRefused
from herdbook.reactors.sensitive import decide_conformance


def node(node_id: str = "s1", node_class: NodeClass = NodeClass.SENSITIVE,
         pool: str = "secure", **fields: object) -> NodeView:
    info = NodeInfo(gpus=(GpuInfo(index=0, uuid="g", name="H100"),), node_class=node_class,
                    labels={"pool": pool} if pool else {})
    base = NodeView(id=node_id, type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, intent=Intent.ELIGIBLE, info=info, version=5)
    from msgspec.structs import replace
    return replace(base, **fields)


def fold(view: NodeView, *events: object) -> NodeView:
    for seq, event in enumerate(events, start=view.version + 1):
        after = apply(view, event, seq)  # type: ignore[arg-type]
        assert after is not None
        view = after
    return view


# claim and release -------------------------------------------------------------------


def test_a_free_sensitive_node_is_claimed_and_a_second_claim_is_refused() -> None:
    event = intents.decide_claim(node(), "op", "ana", "bio", "trial")
    assert isinstance(event, NodeClaimed) and (event.user, event.tenant) == ("ana", "bio")
    claimed = fold(node(), event)
    assert (claimed.claimed_by, claimed.tenant) == ("ana", "bio")
    # the loser of a race decides again on the view with the winner's claim
    with pytest.raises(CommandRefused, match="already claimed by ana \\(tenant bio\\)") as err:
        intents.decide_claim(claimed, "op", "bob", "chem")
    assert not isinstance(err.value, AlreadyDone)   # another user: refused
    with pytest.raises(AlreadyDone, match="already claimed by ana \\(tenant bio\\)"):
        intents.decide_claim(claimed, "op", "ana", "bio")   # the claimant again: done


def test_only_ready_sensitive_nodes_are_claimed() -> None:
    with pytest.raises(CommandRefused, match="only sensitive nodes"):
        intents.decide_claim(node(node_class=NodeClass.STANDARD), "op", "ana", "")
    with pytest.raises(CommandRefused, match="not READY"):
        intents.decide_claim(node(lifecycle=Lifecycle.DOWN), "op", "ana", "")
    with pytest.raises(CommandRefused, match="needs --user"):
        intents.decide_claim(node(), "op", "", "")


def test_release_needs_a_claim_and_marks_the_release_pending() -> None:
    with pytest.raises(CommandRefused, match="not claimed"):
        intents.decide_release(node(), "op")
    claimed = fold(node(), NodeClaimed(node_id="s1", user="ana"))
    released = fold(claimed, intents.decide_release(claimed, "op"))
    assert released.claimed_by is None and released.release_pending


# the wipe ------------------------------------------------------------------------------


def test_a_confirmed_wipe_returns_the_node_to_the_pool_unclaimed() -> None:
    view = fold(node(intent=Intent.DRAINED), NodeClaimed(node_id="s1", user="ana"),
                NodeReleased(node_id="s1"), NodeWipeStarted(node_id="s1", timeout_s=60))
    assert (view.lifecycle, view.wipe_status, view.schedulable) == (
        Lifecycle.BOOTING, "wiping", False)
    view = fold(view, NodeWipeStepReported(node_id="s1", step="nvme_secure_erase", ok=True),
                NodeWiped(node_id="s1", steps=["nvme_secure_erase"]))
    assert (view.lifecycle, view.intent, view.wipe_status) == (
        Lifecycle.READY, Intent.ELIGIBLE, "wiped")
    assert view.schedulable and view.claimed_by is None
    assert view.wipe_steps == {"nvme_secure_erase": "ok"}


def test_a_failed_wipe_quarantines_and_only_a_forced_wipe_or_disable_leaves() -> None:
    view = fold(node(), NodeWipeStarted(node_id="s1"),
                NodeWipeStepReported(node_id="s1", step="ram_scrub", ok=False, detail="exit 1"),
                NodeWipeFailed(node_id="s1", step="ram_scrub", reason="exit 1"))
    assert view.lifecycle is Lifecycle.QUARANTINED and view.state == "QUARANTINED"
    assert not view.schedulable and view.lifecycle_reason == "wipe failed at ram_scrub: exit 1"
    with pytest.raises(CommandRefused, match="--force"):
        intents.decide_wipe(view, "op", "", False, 60.0)
    again = intents.decide_wipe(view, "op", "", True, 60.0)
    assert isinstance(again, NodeWipeStarted) and again.attempt == 2 and again.forced
    assert fold(view, again).lifecycle is Lifecycle.BOOTING
    assert isinstance(intents.decide_disable(view, "op", "retire"), object)
    with pytest.raises(CommandRefused, match="only sensitive"):
        intents.decide_wipe(node(node_class=NodeClass.STANDARD), "op", "", True, 60.0)


def test_the_boot_timeout_does_not_fail_a_node_while_it_wipes() -> None:
    wiping = fold(node(), NodeWipeStarted(node_id="s1", timeout_s=1800))
    timeouts = Timeouts(heartbeat_timeout=30.0, grace_period=60.0, boot_timeout=600.0)
    long_boot = Observation(heartbeat_age=5.0, boot_id="", booting_for=700.0)
    assert decide(wiping, long_boot, timeouts) == []
    assert next_deadline(wiping, 0.0, timeouts, booting_since=0.0) is None


# conformance ---------------------------------------------------------------------------


def views(*nodes: NodeView) -> dict[str, NodeView]:
    return {n.id: n for n in nodes}


def test_the_odd_one_out_of_a_pool_drifts_and_a_sensitive_one_drains_at_once() -> None:
    fleet = views(node("s1"), node("s2"), node("s3"))
    events = decide_conformance(fleet, {"s1": "a", "s2": "a", "s3": "b"}, {})
    records = [e for e in events if isinstance(e, NodeConformanceChanged)]
    assert [(e.node_id, e.expected, e.drift) for e in records] == [
        ("s1", "a", False), ("s2", "a", False), ("s3", "a", True)]
    [drain] = [e for e in events if isinstance(e, NodeDrainStarted)]
    assert drain.node_id == "s3" and drain.causation_id == records[2].event_id
    assert drain.reason == "conformance drift on a sensitive node"


def test_a_drifted_standard_node_is_flagged_not_drained() -> None:
    fleet = views(*(node(f"n{i}", node_class=NodeClass.STANDARD, pool="") for i in range(3)))
    events = decide_conformance(fleet, {"n0": "a", "n1": "a", "n2": "z"}, {})
    assert not [e for e in events if isinstance(e, NodeDrainStarted)]
    assert [e.node_id for e in events if isinstance(e, NodeConformanceChanged) and e.drift] == ["n2"]


def test_the_pool_expected_fingerprint_beats_the_majority() -> None:
    fleet = views(node("s1"), node("s2"), node("s3"))
    events = decide_conformance(fleet, {"s1": "a", "s2": "a", "s3": "good"}, {"secure": "good"})
    assert sorted(e.node_id for e in events
                  if isinstance(e, NodeConformanceChanged) and e.drift) == ["s1", "s2"]


def test_no_majority_no_drift_and_nothing_new_nothing_recorded() -> None:
    fleet = views(node("s1"), node("s2"))
    assert not [e for e in decide_conformance(fleet, {"s1": "a", "s2": "b"}, {})
                if isinstance(e, NodeConformanceChanged) and e.drift]
    settled = views(*(node(f"s{i}", fingerprint="a", fingerprint_expected="a")
                      for i in range(3)))
    assert decide_conformance(settled, {f"s{i}": "a" for i in range(3)}, {}) == []


def test_a_drifted_node_that_is_already_draining_is_not_drained_again() -> None:
    fleet = views(node("s1"), node("s2"), node("s3", intent=Intent.DRAINING))
    events = decide_conformance(fleet, {"s1": "a", "s2": "a", "s3": "b"}, {})
    assert not [e for e in events if isinstance(e, NodeDrainStarted)]



def test_a_late_confirmation_of_a_timed_out_wipe_changes_nothing() -> None:
    quarantined = fold(node(), NodeWipeStarted(node_id="s1"),
                       NodeWipeFailed(node_id="s1", reason="not confirmed within 2s"))
    late = fold(quarantined, NodeWiped(node_id="s1"), NodeWipeFailed(node_id="s1", reason="x"))
    assert late.lifecycle is Lifecycle.QUARANTINED and late.wipe_status == "failed"
    assert late.lifecycle_reason == "wipe failed: not confirmed within 2s"
