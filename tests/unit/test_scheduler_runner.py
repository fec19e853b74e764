"""The allocation reactor and the scheduler worker on the one decide runner, over the
in-memory store and projector (tests/fakes.py): given past events, when a node is lost,
an eval is processed or given up (sometimes with another writer landing first), then
these events, at these versions, stamped with the clock's time and the runner's ids."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from msgspec.structs import replace

from herdbook.config import Config
from herdbook.events.alloc import AllocLost, AllocPlaced, AllocRunning, AllocStopRequested
from herdbook.events.eval_events import EvalCreated, EvalLinked, EvalStatusChanged
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.events.job_events import JobRegistered, JobSpec, Resources
from herdbook.events.node import NodeDrainStarted
from herdbook.projector.eval_view import step
from herdbook.reactors import plan_apply
from herdbook.reactors.allocations import AllocationReactor
from herdbook.reactors.eval_deciders import cluster_eval
from herdbook.reactors.scheduler import Scheduler
from tests import world as shared
from tests.fakes import FakeNats
from tests.world import T0

S = EvalStatus


class World(shared.World):
    """The allocation reactor and the scheduler on the world's one runner."""

    def __init__(self) -> None:
        super().__init__()
        self.config = Config()
        self.reactor = AllocationReactor(self.projector, self.config,  # type: ignore[arg-type]
                                         runner=self.runner)
        self.scheduler = Scheduler(FakeNats(), self.projector, self.config,  # type: ignore[arg-type]
                                   clock=self.clock, runner=self.runner)

    def node(self, node_id: str, gpus: int = 2, **info: Any) -> None:
        super().node(node_id, gpus, **info)

    def job(self, job_id: str = "train", count: int = 2) -> None:
        self.store.fold(JobRegistered(job_id=job_id, spec=JobSpec(
            id=job_id, command=["true"], count=count,
            resources=Resources(cpu=0.1, memory_mb=0, gpus=1))))

    def eval(self, job_id: str = "train", eval_id: str = "e1") -> str:
        self.store.fold(cluster_eval(EvalTrigger.JOB_REGISTER, self.model.jobs[job_id],
                                     eval_id))
        return eval_id

    def placed(self, node_id: str, alloc_id: str, job_id: str = "train",
               index: int = 0) -> None:
        self.store.fold(AllocPlaced(node_id=node_id, alloc_id=alloc_id, job_id=job_id,
                                    eval_id="e0", index=index, command=["true"]))
        self.store.fold(AllocRunning(node_id=node_id, alloc_id=alloc_id, pid=1))

    def statuses(self, eval_id: str) -> list[str]:
        return [e.status.value for e, _ in self.store.appended
                if isinstance(e, EvalCreated | EvalStatusChanged) and e.eval_id == eval_id]


# the allocation reactor ------------------------------------------------------------------


async def test_a_lost_node_loses_its_allocations_then_each_job_gets_a_node_update_eval() -> None:
    w = World()
    w.node("n1")
    w.job()
    w.placed("n1", "a")
    w.placed("n1", "b", index=1)
    version = w.model.alloc_versions["n1"]
    await w.reactor.lose_allocations("n1", "node down", cause="down-1")
    lost = w.appended(AllocLost)
    # one decision: the first at the version decided from, the next after it
    assert [(e.alloc_id, v, e.at, e.event_id) for e, v in lost] == [
        ("a", version, T0, "id0001"), ("b", version + 1, T0, "id0002")]
    [(created, expected)] = w.appended(EvalCreated)
    assert expected == 0
    assert (created.eval_id, created.triggered_by, created.node_id, created.causation_id) == (
        "id0003", EvalTrigger.NODE_UPDATE, "n1", "down-1")
    assert w.model.evals["id0003"].status is S.PENDING


async def test_another_writer_landing_first_is_caught_up_with_and_decided_again() -> None:
    w = World()
    w.node("n1")
    w.job()
    w.placed("n1", "a")
    w.store.race(AllocPlaced(node_id="n1", alloc_id="late", job_id="train", eval_id="e9",
                             index=1, command=["true"]))
    await w.reactor.lose_allocations("n1", "node down")
    lost = w.appended(AllocLost)
    assert [e.alloc_id for e, _ in lost] == ["a", "late"]
    raced = w.store.last["herd.alloc.n1.>"] - 2     # the raced placement, then our two
    assert lost[0][1] == raced
    assert [e.event_id for e, _ in lost] == ["id0002", "id0003"]   # id0001: the stale try


async def test_a_drain_stops_with_a_checkpoint_and_creates_a_node_drain_eval() -> None:
    w = World()
    w.node("n1")
    w.job()
    w.placed("n1", "a")
    w.store.fold(NodeDrainStarted(node_id="n1", urgent=True))
    await w.reactor.drain("n1", urgent=True, deadline_s=None, cause="drain-1")
    [(stop, _)] = w.appended(AllocStopRequested)
    assert (stop.alloc_id, stop.signal, stop.migrate, stop.causation_id) == (
        "a", "SIGUSR1", True, "drain-1")
    [(created, _)] = w.appended(EvalCreated)
    assert created.triggered_by is EvalTrigger.NODE_DRAIN
    await w.reactor.drain_deadline("n1")
    forced = [e for e, _ in w.appended(AllocStopRequested) if e.force]
    assert [e.alloc_id for e in forced] == ["a"]


async def test_an_eval_unblocked_by_someone_else_first_is_left_alone() -> None:
    w = World()
    w.job()
    w.store.fold(EvalCreated(eval_id="b1", job_id="train", status=S.BLOCKED,
                             triggered_by=EvalTrigger.QUEUED_ALLOCS))
    w.store.race(step(w.model.evals["b1"], Step.UNBLOCK, "other leader"))
    await w.reactor.unblock()
    assert w.appended(EvalStatusChanged) == []
    assert w.model.evals["b1"].status is S.SCHEDULING


async def test_eval_gc_goes_by_the_clock() -> None:
    w = World()
    w.job()
    w.store.fold(EvalCreated(eval_id="old", job_id="train", triggered_by=EvalTrigger.SCHEDULED,
                             at=T0))
    w.store.fold(replace(step(w.model.evals["old"], Step.PLAN_SUBMITTED), at=T0))
    w.store.fold(EvalCreated(eval_id="live", job_id="train",
                             triggered_by=EvalTrigger.SCHEDULED, at=T0))
    assert await w.reactor.gc() == 0
    w.clock.advance(3600 + 1)
    assert await w.reactor.gc() == 1
    assert "old" not in w.model.evals and "live" in w.model.evals
    [(gc, _)] = w.appended(EvalStatusChanged)
    assert (gc.step, gc.at) == (Step.GC, T0 + timedelta(seconds=3601))


# the scheduler worker ------------------------------------------------------------------


async def test_an_eval_goes_pending_scheduling_applying_complete_with_ids_from_the_runner(
        ) -> None:
    w = World()
    w.node("n1")
    w.job(count=2)
    eval_id = w.eval()
    await w.scheduler.process(eval_id)
    assert w.statuses(eval_id) == ["scheduling", "applying", "complete"]
    placed = w.appended(AllocPlaced)
    assert sorted(e.alloc_id for e, _ in placed) == ["id0003", "id0004"]
    assert {(e.node_id, e.eval_id, e.at) for e, _ in placed} == {("n1", eval_id, T0)}
    assert w.model.evals[eval_id].status_reason == "placed 2, stopped 0"


async def test_a_plan_that_another_writer_made_stale_is_planned_again() -> None:
    w = World()
    w.node("n1", gpus=1)
    w.node("n2", gpus=1)
    w.job(count=1)
    eval_id = w.eval()
    # someone places on n1 (the fuller-first pick) between our plan and its append
    w.store.race(AllocPlaced(node_id="n1", alloc_id="theirs", job_id="other", eval_id="x",
                             index=0, command=["true"], resources=Resources(gpus=1)))
    await w.scheduler.process(eval_id)
    assert w.statuses(eval_id) == ["scheduling", "applying", "scheduling", "applying",
                                   "complete"]
    [(mine, _)] = w.appended(AllocPlaced)
    assert mine.node_id == "n2"   # n1 is full now


async def test_a_plan_in_atomic_batches_goes_through_the_runner_and_stale_is_planned_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same race, with the plan big enough for atomic batches (``ATOMIC_MIN``): the
    runner stamps both nodes' parts and the stale batch stores nothing, not even n2's."""
    monkeypatch.setattr(plan_apply, "ATOMIC_MIN", 1)
    w = World()
    w.node("n1", gpus=1)
    w.node("n2", gpus=2)
    w.job(count=2)
    eval_id = w.eval()
    batches: list[str] = []
    run_atomic = w.runner.run_atomic

    async def counted(what: str, *args: Any, **kwargs: Any) -> Any:
        batches.append(what)
        return await run_atomic(what, *args, **kwargs)

    monkeypatch.setattr(w.runner, "run_atomic", counted)
    w.store.race(AllocPlaced(node_id="n1", alloc_id="theirs", job_id="other", eval_id="x",
                             index=0, command=["true"], resources=Resources(gpus=1)))
    await w.scheduler.process(eval_id)
    assert w.statuses(eval_id) == ["scheduling", "applying", "scheduling", "applying",
                                   "complete"]
    assert batches == [f"plan of eval {eval_id}"] * 2
    placed = w.appended(AllocPlaced)
    assert [(e.node_id, e.at) for e, _ in placed] == [("n2", T0), ("n2", T0)]
    assert all(e.event_id.startswith("id") for e, _ in placed)


async def test_a_superseded_eval_is_canceled() -> None:
    w = World()
    w.node("n1")
    w.job()
    w.store.fold(EvalCreated(eval_id="older", job_id="train",
                             triggered_by=EvalTrigger.JOB_REGISTER, at=T0))
    w.store.fold(EvalCreated(eval_id="newer", job_id="train",
                             triggered_by=EvalTrigger.JOB_REGISTER, at=T0 + timedelta(1)))
    await w.scheduler.process("older")
    assert w.statuses("older") == ["canceled"]
    assert w.model.evals["older"].status_reason == "superseded by eval newer"


async def test_giving_up_fails_the_eval_and_links_a_delayed_failed_follow_up() -> None:
    w = World()
    w.job()
    eval_id = w.eval()
    await w.scheduler.give_up(eval_id, "delivery limit reached: boom")
    assert w.statuses(eval_id) == ["failed"]
    [(follow, expected)] = w.appended(EvalCreated)
    assert expected == 0
    assert (follow.triggered_by, follow.previous_eval, follow.wait_until) == (
        EvalTrigger.FAILED_FOLLOW_UP, eval_id,
        T0 + timedelta(seconds=float(w.config.scheduler.failed_follow_up_delay)))
    [(link, _)] = w.appended(EvalLinked)
    assert link.next_eval == follow.eval_id
    assert w.scheduler.given_up == 1
    await w.scheduler.give_up(eval_id, "again")      # already failed: nothing more
    assert len(w.appended(EvalCreated)) == 1


async def test_a_plan_expects_the_node_versions_it_was_made_from_not_later_ones() -> None:
    """Another placement lands on n1 (and is folded) after the plan was made but before
    it is applied: the plan was made from the older view, so it conflicts and is made
    again instead of over-booking n1."""
    w = World()
    w.node("n1", gpus=1)
    w.node("n2", gpus=1)
    w.job(count=1)
    eval_id = w.eval()
    append = w.store.append
    landed: list[int] = []

    async def meanwhile(event: Any, expected_version: int | None = None) -> int:
        if isinstance(event, EvalStatusChanged) and event.step is Step.SUBMIT and not landed:
            landed.append(1)
            w.store.fold(AllocPlaced(node_id="n1", alloc_id="theirs", job_id="other",
                                     eval_id="x", index=0, command=["true"],
                                     resources=Resources(gpus=1)))
        return await append(event, expected_version)

    w.store.append = meanwhile  # type: ignore[method-assign]
    await w.scheduler.process(eval_id)
    assert w.statuses(eval_id) == ["scheduling", "applying", "scheduling", "applying",
                                   "complete"]
    [(mine, _)] = w.appended(AllocPlaced)
    assert mine.node_id == "n2"
