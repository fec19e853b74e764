"""Harness tests for the evaluation broker and scheduler on a real nats-server: every
transition of the reference diagram (nomad-eval-states.txt) that herdbook has, with the
PreviousEval / NextEval / BlockedEval pointers, and the node events that drive evals.

The harness runs the real projector, scheduler (durable broker consumer) and
allocation reactor in-process; nodes are made schedulable by appending their events
(no agents: allocation facts are appended as an agent would)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.events.alloc import AllocCompleted, AllocRunning, AllocStatus
from herdbook.events.eval_events import EvalCreated, EvalStatusChanged
from herdbook.events.evals import EvalStatus, EvalTrigger, Step
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec, Requeue, Resources
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeDown,
    NodeDrainStarted,
    NodeInfo,
    NodeRegistered,
)
from herdbook.events.states import Lifecycle, NodeClass
from herdbook.events.store import EventStore
from herdbook.projector.eval_view import spawn, step
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.allocations import AllocationReactor
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.scheduler import Scheduler, new_eval
from tests.conftest import poll
from tests.fakes import FakeClock

S = EvalStatus
CONFIG = """
scheduler:
  nack_timeout: 5s
  delivery_limit: 2
  failed_follow_up_delay: 1s
  unblock_delay: 100ms
  gc_interval: 1h
allocations:
  checkpoint_grace: 7s
  kill_timeout: 3s
"""


async def add_ready_node(store: EventStore, projector: ProjectorRunner, node_id: str, gpus: int,
                         node_class: NodeClass = NodeClass.STANDARD) -> None:
    """A node registered, approved and boot-checked (schedulable), folded into the view."""
    info = NodeInfo(gpus=tuple(GpuInfo(index=i, uuid=f"{node_id}-{i}", name="H100")
                               for i in range(gpus)), node_class=node_class)
    version = 0
    for event in (NodeRegistered(node_id=node_id, info=info, boot_id="b"),
                  NodeApproved(node_id=node_id),
                  NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
        version = await store.append(event, expected_version=version)
    await projector.wait_applied(version)


class Harness:
    def __init__(self, nc: Any, db: Path) -> None:
        self.nc = nc
        self.config = parse_config(CONFIG)
        self.store = EventStore(nc)
        self.projector = ProjectorRunner(nc, str(db), batch_interval=0.01)
        self.runner = DecideRunner(self.store, self.projector, SYSTEM_CLOCK)
        self.reactor = AllocationReactor(self.projector, self.config, runner=self.runner)
        self.scheduler = Scheduler(nc, self.projector, self.config, clock=SYSTEM_CLOCK,
                                   runner=self.runner)
        self.started = False

    async def start(self) -> None:
        await self.scheduler.start()
        self.started = True

    async def add_node(self, node_id: str, gpus: int = 2,
                       node_class: NodeClass = NodeClass.STANDARD) -> None:
        await add_ready_node(self.store, self.projector, node_id, gpus, node_class)
        # A node becoming schedulable unblocks blocked evals after unblock_delay: let
        # that pass, or it may unblock an eval a test made later (plans fail fast).
        await self.wait(lambda: not self.reactor._unblock_pending, what="the node's unblock")

    async def run_job(self, job_id: str = "train", count: int = 2, gpus: int = 1,
                      policy: str = "on_node_failure") -> str:
        spec = JobSpec(id=job_id, command=["true"], count=count,
                       resources=Resources(cpu=0.1, memory_mb=0, gpus=gpus),
                       requeue=Requeue(policy=policy))
        version = await self.store.last_sequence("job", job_id)
        seq = await self.store.append(JobRegistered(job_id=job_id, spec=spec),
                                      expected_version=version)
        await self.projector.wait_applied(seq)
        created = new_eval(EvalTrigger.JOB_REGISTER, self.projector.jobs[job_id])
        await self.projector.wait_applied(await self.store.append(created, expected_version=0))
        return created.eval_id

    async def statuses(self, eval_id: str) -> list[str]:
        """Every status the eval went through, from the stream."""
        out = []
        for _, event in await self.store.load("eval", eval_id):
            if isinstance(event, EvalCreated | EvalStatusChanged):
                out.append(event.status.value)
        return out

    def eval(self, eval_id: str) -> Any:
        return self.projector.evals.get(eval_id)

    def allocs(self, **match: Any) -> list[Any]:
        return sorted((a for a in self.projector.allocs.values()
                       if all(getattr(a, k) == v for k, v in match.items())),
                      key=lambda a: (a.index, a.version))

    async def wait(self, predicate: Callable[[], Any], timeout: float = 20.0,
                   what: str = "") -> Any:
        return await poll(predicate, timeout, what)

    async def wait_status(self, eval_id: str, *statuses: EvalStatus, timeout: float = 20.0) -> Any:
        return await self.wait(lambda: (e := self.eval(eval_id)) and e.status in statuses
                               and e, timeout, f"eval {eval_id} in {statuses}")

    async def run_allocs(self, *allocs: Any) -> None:
        """What the node's agent reports when it starts them."""
        for a in allocs:
            seq = await self.store.append(AllocRunning(node_id=a.node_id, alloc_id=a.id, pid=1,
                                                       actor=f"agent:{a.node_id}"))
        await self.projector.wait_applied(seq)



# the happy path: event -> pending -> scheduling -> applying -> complete ----------------


async def test_job_register_eval_goes_pending_scheduling_applying_complete(h: Harness) -> None:
    await h.add_node("n1", gpus=4)
    await h.start()
    eval_id = await h.run_job(count=3)
    done = await h.wait_status(eval_id, S.COMPLETE)
    assert await h.statuses(eval_id) == ["pending", "scheduling", "applying", "complete"]
    assert done.triggered_by is EvalTrigger.JOB_REGISTER and done.status_reason == "placed 3, stopped 0"
    allocs = h.allocs(job_id="train")
    assert [(a.index, a.node_id, a.status) for a in allocs] == [
        (i, "n1", AllocStatus.PENDING) for i in range(3)]
    assert {a.eval_id for a in allocs} == {eval_id}


async def test_bin_packing_fills_one_node_before_the_next(h: Harness) -> None:
    for node_id in ("n1", "n2", "n3"):
        await h.add_node(node_id, gpus=4)
    await h.start()
    await h.wait_status(await h.run_job(count=5), S.COMPLETE)
    per_node = sorted(len(h.allocs(node_id=n)) for n in ("n1", "n2", "n3"))
    assert per_node == [0, 1, 4]


# blocked evals: queued-allocs, unblock, reblock, duplicates ---------------------------


async def test_unfittable_allocations_get_one_blocked_eval_that_completes_when_a_node_comes(
        h: Harness) -> None:
    await h.add_node("n1", gpus=2)
    await h.start()
    eval_id = await h.run_job(count=3)
    first = await h.wait_status(eval_id, S.COMPLETE)
    # scheduling -. queued-allocs .-> blocked: new.PreviousEval = old.ID, old.BlockedEval = new.ID
    blocked = h.eval(first.blocked_eval)
    assert blocked.status is S.BLOCKED and blocked.triggered_by is EvalTrigger.QUEUED_ALLOCS
    assert blocked.previous_eval == eval_id and first.next_eval is None
    assert len(h.allocs(job_id="train")) == 2
    # blocked -- unblocked by external state changes --> scheduling --> ... --> complete
    await h.add_node("n2", gpus=2)
    await h.wait_status(blocked.id, S.COMPLETE)
    assert await h.statuses(blocked.id) == ["blocked", "scheduling", "applying", "complete"]
    assert [a.node_id for a in h.allocs(job_id="train")] == ["n1", "n1", "n2"]


async def test_an_unblocked_eval_that_still_does_not_fit_is_reblocked(h: Harness) -> None:
    await h.add_node("n1", gpus=2)
    await h.start()
    first = await h.wait_status(await h.run_job(count=3, gpus=2), S.COMPLETE)
    blocked_id = first.blocked_eval
    await h.add_node("small", gpus=1)    # capacity changes, but one GPU is not enough
    await h.wait(lambda: h.eval(blocked_id).status is S.BLOCKED
                 and h.eval(blocked_id).status_reason.endswith("still do not fit"))
    # scheduling -- not all allocs placed, reuse already-blocked eval --> blocked
    assert await h.statuses(blocked_id) == ["blocked", "scheduling", "blocked"]
    assert [e.id for e in h.projector.evals.values() if e.status is S.BLOCKED] == [blocked_id]


async def test_duplicate_blocked_evals_of_a_job_are_canceled(h: Harness) -> None:
    await h.add_node("n1", gpus=1)
    await h.start()
    first = await h.wait_status(await h.run_job(count=2), S.COMPLETE)
    old_blocked = first.blocked_eval
    second = await h.wait_status(await h.run_job(count=3), S.COMPLETE)  # a new job version
    assert second.blocked_eval not in (None, old_blocked)
    # blocked -- duplicate blocked evals reaped --> canceled
    dup = await h.wait_status(old_blocked, S.CANCELED)
    assert dup.status_reason == f"duplicate of blocked eval {second.blocked_eval}"
    assert h.eval(second.blocked_eval).status is S.BLOCKED


# delayed, superseded, canceled ---------------------------------------------------------


async def test_a_delayed_eval_is_nakked_with_its_delay_then_scheduled(h: Harness) -> None:
    await h.add_node("n1")
    await h.start()
    await h.run_job(count=1)
    first = await h.wait(lambda: [e for e in h.projector.evals.values() if e.status is S.COMPLETE])
    job = h.projector.jobs["train"]
    [created] = spawn(None, EvalTrigger.SCHEDULED, "delayed-1", job.id,
                      wait_until=datetime.now(UTC) + timedelta(seconds=1.5))
    started = time.monotonic()
    await h.store.append(created, expected_version=0)
    await h.wait_status("delayed-1", S.DELAYED, timeout=5)
    await h.wait_status("delayed-1", S.COMPLETE, timeout=15)
    assert time.monotonic() - started >= 1.4
    # pending -- if delayed --> delayed -- dequeued --> scheduling
    assert await h.statuses("delayed-1") == ["pending", "delayed", "scheduling", "applying",
                                             "complete"] or \
        await h.statuses("delayed-1") == ["pending", "delayed", "scheduling", "complete"]
    assert first


async def test_an_eval_superseded_by_a_newer_one_for_its_job_is_canceled(h: Harness) -> None:
    await h.add_node("n1", gpus=4)
    older = await h.run_job(count=1)
    newer = await h.run_job(count=2)
    await h.start()
    # pending -- if no-op --> canceled
    done = await h.wait_status(older, S.CANCELED)
    assert done.status_reason == f"superseded by eval {newer}"
    await h.wait_status(newer, S.COMPLETE)
    assert len(h.allocs(job_id="train")) == 2


async def test_an_eval_in_scheduling_when_a_newer_one_arrives_is_canceled(h: Harness) -> None:
    await h.add_node("n1", gpus=4)
    older = await h.run_job(count=1)
    view = h.eval(older)   # a worker dequeued it, then died
    await h.projector.wait_applied(await h.store.append(step(view, Step.DEQUEUE),
                                                        expected_version=view.version))
    newer = await h.run_job(count=2)
    await h.start()
    # scheduling -- canceled by job update/stop --> canceled
    await h.wait_status(older, S.CANCELED)
    assert await h.statuses(older) == ["pending", "scheduling", "canceled"]
    await h.wait_status(newer, S.COMPLETE)


# failures: max plan attempts, delivery limit ------------------------------------------


async def test_plan_conflicts_fail_the_eval_after_max_plan_attempts_with_a_blocked_eval(
        h: Harness) -> None:
    await h.add_node("n1")
    h.scheduler.expected_alloc_version = lambda node_id: 1   # always stale: a real conflict
    await h.start()
    eval_id = await h.run_job(count=1)
    failed = await h.wait_status(eval_id, S.FAILED)
    history = await h.statuses(eval_id)
    attempts = h.config.scheduler.max_plan_attempts
    # scheduling -- submit --> applying -- failed --> scheduling, max_plan_attempts times
    assert history == (["pending"] + ["scheduling", "applying"] * attempts
                       + ["scheduling", "failed"])
    # scheduling -. max-plan-attempts .-> blocked; old.BlockedEval = new.ID
    blocked = h.eval(failed.blocked_eval)
    assert blocked.triggered_by is EvalTrigger.MAX_PLAN_ATTEMPTS and blocked.status is S.BLOCKED
    assert blocked.previous_eval == eval_id
    assert h.allocs(job_id="train") == []
    # once plans apply again, the blocked eval places the job
    h.scheduler.expected_alloc_version = lambda node_id: h.projector.alloc_versions.get(node_id, 0)
    h.reactor.request_unblock()
    await h.wait_status(blocked.id, S.COMPLETE)
    assert len(h.allocs(job_id="train")) == 1


async def test_delivery_limit_fails_the_eval_and_creates_a_delayed_failed_follow_up(
        h: Harness) -> None:
    await h.add_node("n1")
    real = h.scheduler.process
    calls: list[str] = []

    async def broken(eval_id: str) -> None:
        calls.append(eval_id)
        raise RuntimeError("scheduler bug")

    h.scheduler.process = broken  # type: ignore[method-assign]
    await h.start()
    eval_id = await h.run_job(count=1)
    failed = await h.wait_status(eval_id, S.FAILED, timeout=30)
    # the failed-follow-up eval is linked right after the failure lands
    failed = await h.wait(lambda: (e := h.eval(eval_id)).next_eval and e)
    assert calls == [eval_id] * h.config.scheduler.delivery_limit
    # pending -- undeliverable evals reaped --> failed
    assert await h.statuses(eval_id) == ["pending", "failed"]
    assert failed.status_reason.startswith("delivery limit reached")
    # failed -. failed-follow-up .-> pending: new.PreviousEval = old.ID, old.NextEval = new.ID
    follow = h.eval(failed.next_eval)
    assert follow.triggered_by is EvalTrigger.FAILED_FOLLOW_UP and follow.previous_eval == eval_id
    assert follow.wait_until is not None and follow.wait_until > failed.modified_at
    h.scheduler.process = real  # type: ignore[method-assign]
    await h.wait_status(follow.id, S.COMPLETE, timeout=30)
    assert len(h.allocs(job_id="train")) == 1


# GC ---------------------------------------------------------------------------------


async def test_eval_gc_deletes_terminal_evals_older_than_the_threshold(h: Harness) -> None:
    await h.add_node("n1")
    await h.start()
    eval_id = await h.run_job(count=1)
    await h.wait_status(eval_id, S.COMPLETE)
    assert await h.reactor.gc() == 0    # younger than eval_gc_threshold (1h)
    h.reactor.runner.clock = FakeClock(datetime.now(UTC) + timedelta(hours=1, seconds=1))
    assert await h.reactor.gc() == 1
    # complete -- garbage collection --> deleted: gone from the view, kept in the log
    await h.wait(lambda: h.eval(eval_id) is None)
    assert (await h.statuses(eval_id))[-1] == "deleted"


# node events drive evals ----------------------------------------------------------------


async def test_node_down_loses_its_allocations_and_a_node_update_eval_requeues_them(
        h: Harness) -> None:
    await h.add_node("n1")
    await h.start()
    await h.wait_status(await h.run_job(count=2), S.COMPLETE)
    await h.run_allocs(*h.allocs(node_id="n1"))
    await h.add_node("n2")
    await h.store.append(NodeDown(node_id="n1", heartbeat_age=90.0, reason="grace expired"))
    moved = await h.wait(lambda: len(h.allocs(node_id="n2")) == 2 and h.allocs(node_id="n2"))
    lost = h.allocs(node_id="n1")
    assert {a.status for a in lost} == {AllocStatus.LOST}
    assert sorted((a.requeue_count, a.previous_alloc) for a in moved) == sorted(
        (1, a.id) for a in lost)
    update = [e for e in h.projector.evals.values() if e.triggered_by is EvalTrigger.NODE_UPDATE]
    assert len(update) == 1 and update[0].node_id == "n1"
    await h.wait_status(update[0].id, S.COMPLETE)


async def test_a_leader_that_starts_after_a_node_went_down_loses_and_requeues_its_allocations(
        h: Harness) -> None:
    """The node goes DOWN while no allocation reactor runs (no leader); the one that
    starts next finds it DOWN and does what the DOWN event would have made it do."""
    await h.add_node("n1")
    await h.start()
    await h.wait_status(await h.run_job(count=2), S.COMPLETE)
    await h.run_allocs(*h.allocs(node_id="n1"))
    await h.reactor.stop()          # the leader goes away
    await h.add_node("n2")
    await h.store.append(NodeDown(node_id="n1", heartbeat_age=90.0, reason="grace expired"))
    await h.wait(lambda: h.projector.nodes["n1"].lifecycle is Lifecycle.DOWN)
    h.reactor = AllocationReactor(h.projector, h.config, runner=h.runner)
    h.reactor.start()               # a new leader
    moved = await h.wait(lambda: len(h.allocs(node_id="n2")) == 2 and h.allocs(node_id="n2"))
    assert {a.status for a in h.allocs(node_id="n1")} == {AllocStatus.LOST}
    assert all(a.requeue_count == 1 for a in moved)


async def test_allocations_on_a_down_sensitive_node_are_never_requeued_automatically(
        h: Harness) -> None:
    await h.add_node("s1", node_class=NodeClass.SENSITIVE)
    await h.add_node("s2", node_class=NodeClass.SENSITIVE)
    await h.start()
    spec = JobSpec(id="secret", command=["true"], count=1,
                   resources=Resources(cpu=0.1, memory_mb=0, gpus=1),
                   requeue=Requeue(policy="always"))
    spec = JobSpec(**{**{f: getattr(spec, f) for f in spec.__struct_fields__},
                      "constraints": type(spec.constraints)(node_class="sensitive")})
    await h.store.append(JobRegistered(job_id="secret", spec=spec), expected_version=0)
    await h.projector.wait_applied(await h.store.last_sequence("job", "secret"))
    created = new_eval(EvalTrigger.JOB_REGISTER, h.projector.jobs["secret"])
    await h.store.append(created, expected_version=0)
    await h.wait_status(created.eval_id, S.COMPLETE)
    [alloc] = h.allocs(job_id="secret")
    await h.store.append(NodeDown(node_id=alloc.node_id, heartbeat_age=400.0))
    await h.wait(lambda: h.allocs(job_id="secret")[0].status is AllocStatus.LOST)
    await asyncio.sleep(1.0)
    [still] = h.allocs(job_id="secret")
    assert still.requeue_allowed is False
    assert not [e for e in h.projector.evals.values() if e.triggered_by is EvalTrigger.NODE_UPDATE]


async def test_drain_migrates_allocations_and_urgent_drain_asks_for_a_checkpoint(
        h: Harness) -> None:
    await h.add_node("n1")
    await h.start()
    await h.wait_status(await h.run_job(count=2), S.COMPLETE)
    await h.run_allocs(*h.allocs(node_id="n1"))
    await h.add_node("n2")
    await h.store.append(NodeDrainStarted(node_id="n1", urgent=True, deadline_s=1.0))
    moved = await h.wait(lambda: len(h.allocs(node_id="n2")) == 2 and h.allocs(node_id="n2"))
    old = h.allocs(node_id="n1")
    assert {(a.desired, a.migrate, a.status) for a in old} == {("stop", True, AllocStatus.STOPPING)}
    assert sorted(a.previous_alloc for a in moved) == sorted(a.id for a in old)
    assert all(a.requeue_count == 0 for a in moved)      # a migration is not a requeue
    drain_evals = [e for e in h.projector.evals.values() if e.triggered_by is EvalTrigger.NODE_DRAIN]
    assert len(drain_evals) == 1
    stops = [e for _, e in await h.store.load("alloc", "n1")
             if e.event_name.endswith("stop_requested")]
    assert [(s.signal, s.grace_s, s.force) for s in stops[:2]] == [("SIGUSR1", 7.0, False)] * 2
    # the deadline (1s) forces the stop of what still runs
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stops = [e for _, e in await h.store.load("alloc", "n1")
                 if e.event_name.endswith("stop_requested")]
        if any(s.force for s in stops):
            break
        await asyncio.sleep(0.2)
    assert sorted(s.alloc_id for s in stops if s.force) == sorted(a.id for a in old)


async def test_job_stop_stops_its_allocations_through_a_job_deregister_eval(h: Harness) -> None:
    await h.add_node("n1")
    await h.start()
    first = await h.wait_status(await h.run_job(count=3), S.COMPLETE)
    assert h.eval(first.blocked_eval).status is S.BLOCKED
    await h.run_allocs(*h.allocs(job_id="train"))
    job = h.projector.jobs["train"]
    seq = await h.store.append(JobDeregistered(job_id="train"), expected_version=job.version)
    await h.projector.wait_applied(seq)
    created = new_eval(EvalTrigger.JOB_DEREGISTER, h.projector.jobs["train"])
    await h.store.append(created, expected_version=0)
    await h.wait_status(created.eval_id, S.COMPLETE)
    assert {(a.desired, a.status_reason) for a in h.allocs(job_id="train")} == {
        ("stop", "job stopped")}
    # blocked -- if no-op --> canceled: the stopped job waits for no capacity
    canceled = await h.wait_status(first.blocked_eval, S.CANCELED)
    assert canceled.status_reason == "job train stopped"


async def test_an_operator_retries_a_failed_eval(h: Harness) -> None:
    await h.add_node("n1")
    h.scheduler.expected_alloc_version = lambda node_id: 1
    await h.start()
    failed = await h.wait_status(await h.run_job(count=1), S.FAILED)
    h.scheduler.expected_alloc_version = lambda node_id: h.projector.alloc_versions.get(node_id, 0)
    # failed -- retry --> scheduling (the broker delivers it again) --> complete
    await h.store.append(step(failed, Step.RETRY, "operator"), expected_version=failed.version)
    await h.wait_status(failed.id, S.COMPLETE)
    assert (await h.statuses(failed.id))[-4:] == ["failed", "scheduling", "applying", "complete"]


async def test_a_completed_allocation_frees_capacity_for_a_blocked_eval(h: Harness) -> None:
    await h.add_node("n1", gpus=1)
    await h.start()
    first = await h.wait_status(await h.run_job(count=2), S.COMPLETE)
    [running] = h.allocs(job_id="train")
    await h.run_allocs(running)
    await h.store.append(AllocCompleted(node_id="n1", alloc_id=running.id, actor="agent:n1"))
    await h.wait_status(first.blocked_eval, S.COMPLETE)
    assert [a.status for a in h.allocs(job_id="train")] == [AllocStatus.COMPLETE,
                                                            AllocStatus.PENDING]
