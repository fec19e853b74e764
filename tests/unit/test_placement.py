"""The scheduler's pure half: reconcile a job with its allocations, bin-pack on nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from herdbook.events.alloc import AllocStatus
from herdbook.events.job_events import Constraints, JobSpec, Requeue, Resources
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Intent, Lifecycle, NodeClass, NodeType
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.placement import Slot, capacities, place, reconcile

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(count: int = 3, policy: str = "on_node_failure", max_requeue: int = 3,
        status: str = "running", gpus: int = 1, **constraints: object) -> JobView:
    spec = JobSpec(id="train", command=["true"], count=count,
                   resources=Resources(cpu=1.0, memory_mb=0, gpus=gpus),
                   constraints=Constraints(**constraints),  # type: ignore[arg-type]
                   requeue=Requeue(policy=policy, max_requeue=max_requeue))
    return JobView(id="train", spec=spec, status=status)


_seq = iter(range(1, 1_000_000))


def alloc(index: int, status: AllocStatus = AllocStatus.RUNNING, node: str = "n1", *,
          desired: str = "run", migrate: bool = False, requeue_count: int = 0,
          requeue_allowed: bool = True, gpus: int = 1, aid: str | None = None) -> AllocView:
    seq = next(_seq)
    return AllocView(id=aid or f"a{seq}", job_id="train", node_id=node, eval_id="e",
                     index=index, command=["true"], resources=Resources(gpus=gpus, memory_mb=0),
                     status=status, desired=desired, migrate=migrate,
                     requeue_count=requeue_count, requeue_allowed=requeue_allowed,
                     created_at=T0 + timedelta(seconds=seq), version=seq)


def node(node_id: str, gpus: int = 2, cpus: int = 8, *, schedulable: bool = True,
         node_class: NodeClass = NodeClass.STANDARD, labels: dict[str, str] | None = None,
         node_type: NodeType = NodeType.COMPUTE) -> NodeView:
    info = NodeInfo(cpus=cpus, gpus=tuple(GpuInfo(index=i, uuid=f"{node_id}-{i}", name="H100")
                                          for i in range(gpus)),
                    labels=labels or {}, node_class=node_class)
    return NodeView(id=node_id, type=node_type,
                    approval=Approval.APPROVED if schedulable else Approval.PENDING,
                    lifecycle=Lifecycle.READY, intent=Intent.ELIGIBLE, info=info)


# reconcile ---------------------------------------------------------------------------


def test_a_new_job_wants_every_slot() -> None:
    assert [s.index for s in reconcile(job(3), []).place] == [0, 1, 2]


def test_running_and_complete_slots_are_left_alone() -> None:
    out = reconcile(job(2), [alloc(0), alloc(1, AllocStatus.COMPLETE)])
    assert out.place == [] and out.stop == []


def test_lost_allocations_are_requeued_by_policy_with_a_count() -> None:
    lost = alloc(0, AllocStatus.LOST, aid="old")
    [slot] = reconcile(job(1), [lost]).place
    assert slot == Slot(0, 1, "old", "requeue: node lost")
    assert reconcile(job(1, policy="never"), [lost]).place == []


def test_requeue_stops_at_max_requeue() -> None:
    assert reconcile(job(1, max_requeue=2), [alloc(0, AllocStatus.LOST, requeue_count=2)]).place == []


def test_lost_on_a_sensitive_node_is_never_requeued_automatically() -> None:
    out = reconcile(job(1, policy="always"), [alloc(0, AllocStatus.LOST, requeue_allowed=False)])
    assert out.place == []


def test_failed_allocations_are_requeued_only_with_policy_always() -> None:
    failed = alloc(0, AllocStatus.FAILED)
    assert reconcile(job(1), [failed]).place == []
    assert [s.requeue_count for s in reconcile(job(1, policy="always"), [failed]).place] == [1]


def test_a_draining_allocation_is_migrated_at_once_keeping_its_requeue_count() -> None:
    moving = alloc(0, AllocStatus.STOPPING, desired="stop", migrate=True, requeue_count=1,
                   aid="m")
    [slot] = reconcile(job(1), [moving]).place
    assert (slot.index, slot.requeue_count, slot.previous) == (0, 1, "m")


def test_the_replacement_satisfies_the_slot_once_placed() -> None:
    moving = alloc(0, AllocStatus.STOPPING, desired="stop", migrate=True)
    out = reconcile(job(1), [moving, alloc(0, AllocStatus.PENDING, node="n2")])
    assert out.place == [] and out.stop == []


def test_a_stopped_job_stops_everything_live() -> None:
    running, done = alloc(0), alloc(1, AllocStatus.COMPLETE)
    out = reconcile(job(2, status="dead"), [running, done])
    assert [(s.alloc.id, s.reason) for s in out.stop] == [(running.id, "job stopped")]
    assert out.place == []


def test_scaling_down_stops_the_highest_slots() -> None:
    allocs = [alloc(i) for i in range(4)]
    out = reconcile(job(2), allocs)
    assert sorted(s.alloc.index for s in out.stop) == [2, 3]


def test_two_live_allocations_in_one_slot_keep_the_newest() -> None:
    older, newer = alloc(0), alloc(0)
    assert [s.alloc.id for s in reconcile(job(1), [older, newer]).stop] == [older.id]


# place -------------------------------------------------------------------------------


def test_bin_packing_fills_the_fullest_feasible_node_first() -> None:
    caps = capacities([node("a", gpus=4), node("b", gpus=4)], [alloc(0, node="b")])
    placed, unplaced = place(job(3).spec, [Slot(1), Slot(2)], caps)
    assert [p.node_id for p in placed] == ["b", "b"] and unplaced == []


def test_what_does_not_fit_is_returned_unplaced() -> None:
    caps = capacities([node("a", gpus=2)], [])
    placed, unplaced = place(job(3).spec, [Slot(0), Slot(1), Slot(2)], caps)
    assert len(placed) == 2 and [s.index for s in unplaced] == [2]


def test_unschedulable_requester_and_sensitive_nodes_are_not_candidates() -> None:
    nodes = [node("off", schedulable=False), node("req", node_type=NodeType.REQUESTER),
             node("sens", node_class=NodeClass.SENSITIVE)]
    placed, unplaced = place(job(1).spec, [Slot(0)], capacities(nodes, []))
    assert placed == [] and len(unplaced) == 1


def test_constraints_on_labels_and_class() -> None:
    nodes = [node("a", labels={"zone": "a"}), node("b", labels={"zone": "b"}),
             node("s", node_class=NodeClass.SENSITIVE, labels={"zone": "b"})]
    spec = job(1, labels={"zone": "b"}).spec
    assert [p.node_id for p in place(spec, [Slot(0)], capacities(nodes, []))[0]] == ["b"]
    sensitive = job(1, node_class="sensitive").spec
    assert [p.node_id for p in place(sensitive, [Slot(0)], capacities(nodes, []))[0]] == ["s"]


def test_cpu_capacity_counts_and_zero_means_unknown() -> None:
    spec = JobSpec(id="cpu", command=["true"], resources=Resources(cpu=3.0, memory_mb=0))
    placed, unplaced = place(spec, [Slot(0), Slot(1), Slot(2)],
                             capacities([node("a", gpus=0, cpus=8)], []))
    assert len(placed) == 2 and len(unplaced) == 1
    placed, _ = place(spec, [Slot(0), Slot(1)], capacities([node("u", gpus=0, cpus=0)], []))
    assert len(placed) == 2


def test_draining_nodes_are_avoided_for_replacements() -> None:
    caps = capacities([node("a", gpus=4), node("b", gpus=4)], [alloc(0, node="a")])
    placed, _ = place(job(2).spec, [Slot(1)], caps, avoid=frozenset({"a"}))
    assert [p.node_id for p in placed] == ["b"]


@settings(max_examples=200, deadline=None)
@given(gpus=st.lists(st.integers(0, 8), min_size=1, max_size=6), count=st.integers(1, 30),
       need=st.integers(1, 3))
def test_placement_never_overcommits_and_places_as_much_as_fits_one_by_one(
        gpus: list[int], count: int, need: int) -> None:
    nodes = [node(f"n{i}", gpus=g) for i, g in enumerate(gpus)]
    caps = capacities(nodes, [])
    placed, unplaced = place(job(count, gpus=need).spec, [Slot(i) for i in range(count)], caps)
    assert len(placed) + len(unplaced) == count
    for cap in caps:
        assert cap.used_gpus <= cap.gpus
    # it stops only when no node has room for one more
    if unplaced:
        assert all(cap.gpus - cap.used_gpus < need for cap in caps)
