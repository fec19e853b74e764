"""The allocation reactor's deciders, without I/O: given past events folded into a read
model, when a node is lost, drained or past its drain deadline, then these events at
the version of the node's allocations."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

from herdbook.events.alloc import (
    AllocCompleted,
    AllocLost,
    AllocPlaced,
    AllocRunning,
    AllocStopRequested,
)
from herdbook.events.codec import AnyEvent
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeDrainStarted,
    NodeInfo,
    NodeRegistered,
)
from herdbook.events.states import NodeClass
from herdbook.projector.tables import ReadModel
from herdbook.reactors.alloc_deciders import (
    ACTOR,
    DrainAllocations,
    KillAtDrainDeadline,
    LoseAllocations,
    decide_drain,
    decide_drain_deadline,
    decide_lost,
    jobs_of,
    live_on,
)
from herdbook.reactors.decide_runner import Context

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def context() -> Context:
    ids = count(1)
    return Context(now=T0, new_id=lambda: f"id{next(ids)}")


def given(*events: AnyEvent) -> ReadModel:
    model = ReadModel()
    for seq, event in enumerate(events, start=1):
        model.fold(seq, event)
    return model


def node(node_id: str, node_class: NodeClass = NodeClass.STANDARD) -> list[AnyEvent]:
    info = NodeInfo(gpus=(GpuInfo(index=0, uuid=f"{node_id}-0", name="H100"),),
                    node_class=node_class)
    return [NodeRegistered(node_id=node_id, boot_id="b", info=info),
            NodeApproved(node_id=node_id),
            NodeBootChecked(node_id=node_id, boot_id="b", passed=True)]


def placed(node_id: str, alloc_id: str, job_id: str = "train", index: int = 0) -> AllocPlaced:
    return AllocPlaced(node_id=node_id, alloc_id=alloc_id, job_id=job_id, eval_id="e1",
                       index=index, command=["true"])


def running_on_n1(*, node_class: NodeClass = NodeClass.STANDARD) -> ReadModel:
    """n1 runs a (running), b (pending) and ran c (completed); n2 runs d."""
    return given(*node("n1", node_class), *node("n2"),
                 placed("n1", "a"), AllocRunning(node_id="n1", alloc_id="a", pid=1),
                 placed("n1", "b", index=1),
                 placed("n1", "c", job_id="eval-me", index=2),
                 AllocCompleted(node_id="n1", alloc_id="c"),
                 placed("n2", "d", job_id="other"))


def test_a_lost_node_loses_its_live_allocations_at_its_allocations_version() -> None:
    model = running_on_n1()
    decision = decide_lost(model, LoseAllocations("n1", "node down: grace expired", "ev9"),
                           context())
    assert decision.expected == model.alloc_versions["n1"]
    assert [(type(e), e.alloc_id, e.requeue_allowed, e.reason, e.causation_id, e.actor)
            for e in decision.events if isinstance(e, AllocLost)] == [
        (AllocLost, alloc, True, "node down: grace expired", "ev9", ACTOR)
        for alloc in ("a", "b")]
    assert len(decision.events) == 2


def test_allocations_lost_on_a_sensitive_node_are_not_requeued_automatically() -> None:
    model = running_on_n1(node_class=NodeClass.SENSITIVE)
    decision = decide_lost(model, LoseAllocations("n1", "down"), context())
    assert [e.requeue_allowed for e in decision.events if isinstance(e, AllocLost)] == [
        False, False]


def test_a_node_without_allocations_loses_nothing() -> None:
    model = given(*node("n1"))
    decision = decide_lost(model, LoseAllocations("n1", "down"), context())
    assert decision.expected == 0 and list(decision.events) == []


def drain(urgent: bool) -> DrainAllocations:
    return DrainAllocations("n1", urgent, checkpoint_signal="SIGUSR1", checkpoint_grace_s=7.0,
                            kill_timeout_s=3.0, cause="drain-ev")


def test_an_urgent_drain_asks_for_a_checkpoint_before_it_stops_and_migrates() -> None:
    model = running_on_n1()
    decision = decide_drain(model, drain(urgent=True), context())
    assert decision.expected == model.alloc_versions["n1"]
    assert [(e.alloc_id, e.migrate, e.signal, e.grace_s, e.kill_timeout_s, e.reason,
             e.causation_id) for e in decision.events if isinstance(e, AllocStopRequested)] == [
        (alloc, True, "SIGUSR1", 7.0, 3.0, "urgent drain", "drain-ev") for alloc in ("a", "b")]


def test_a_plain_drain_stops_with_sigterm_and_skips_allocations_already_stopping() -> None:
    model = running_on_n1()
    model.fold(99, AllocStopRequested(node_id="n1", alloc_id="b", reason="operator"))
    decision = decide_drain(model, drain(urgent=False), context())
    assert [(e.alloc_id, e.signal, e.grace_s, e.reason) for e in decision.events
            if isinstance(e, AllocStopRequested)] == [("a", "SIGTERM", 0.0, "drain")]
    assert decision.expected == 99


def test_the_drain_deadline_kills_what_still_runs_on_a_draining_node() -> None:
    model = running_on_n1()
    model.fold(50, NodeDrainStarted(node_id="n1", urgent=False, deadline_s=60.0))
    decision = decide_drain_deadline(model, KillAtDrainDeadline("n1"), context())
    assert decision is not None
    assert [(e.alloc_id, e.force, e.migrate, e.reason) for e in decision.events
            if isinstance(e, AllocStopRequested)] == [
        (alloc, True, True, "drain deadline") for alloc in ("a", "b")]


def test_the_drain_deadline_of_a_node_no_longer_draining_decides_nothing() -> None:
    assert decide_drain_deadline(running_on_n1(), KillAtDrainDeadline("n1"), context()) is None
    assert decide_drain_deadline(ReadModel(), KillAtDrainDeadline("gone"), context()) is None


def test_live_allocations_and_the_jobs_events_touched() -> None:
    model = running_on_n1()
    assert [a.id for a in live_on(model.allocs.values(), "n1")] == ["a", "b"]
    lost = decide_lost(model, LoseAllocations("n1", "down"), context()).events
    assert jobs_of(model, lost) == ["train"]
    assert jobs_of(model, [AllocLost(node_id="n1", alloc_id="c"),
                           AllocLost(node_id="n2", alloc_id="d"),
                           AllocLost(node_id="n1", alloc_id="unknown")]) == ["eval-me", "other"]
