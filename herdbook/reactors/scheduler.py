"""The evaluation broker and the scheduler worker (DESIGN §6, Nomad's eval model).

The broker is a durable JetStream consumer on ``herd.eval.*.created`` and
``herd.eval.*.enqueued`` (unblocked or retried evals):

- ``ack_wait`` = ``scheduler.nack_timeout``: a worker that dies mid-eval loses it to
  redelivery; ``max_deliver`` = ``scheduler.delivery_limit``: after the last delivery
  fails, the eval is failed and a *failed-follow-up* eval is created, delayed by
  ``failed_follow_up_delay`` (the same happens on the server's max-deliveries advisory,
  for a worker that crashed every time);
- a delayed eval (``wait_until`` in the future) is nak'ed with that delay;
- one eval per job at a time (a per-job lock; the waiting message is kept alive
  with ``in_progress``); an eval superseded by a newer pending one for the same job
  is canceled.

The worker reconciles the job (``placement.reconcile``), bin-packs the placements,
and applies the plan as allocation events, one node's events with optimistic
concurrency on ``herd.alloc.<node_id>.>``. A conflict goes back to scheduling; after
``max_plan_attempts`` the eval fails and a blocked eval (max-plan-attempts) is
created. What does not fit gets one blocked eval (queued-allocs) per job; older
blocked evals of the job are canceled as duplicates.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from herdbook.config import Config
from herdbook.events.alloc import AllocEvent, AllocPlaced, AllocStopRequested
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.base import Event, new_id
from herdbook.events.eval_events import EvalCreated, EvalEnqueued, EvalEvent
from herdbook.events.evals import EvalStatus, Step
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.states import Intent
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.eval_view import EvalView, apply_eval, spawn, step
from herdbook.projector.job_view import JobView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.placement import Placement, Stop, capacities, place, reconcile

log = logging.getLogger(__name__)

CONSUMER = "herd-scheduler"
BROKER_SUBJECTS = ["herd.eval.*.created", "herd.eval.*.enqueued"]
ACTOR = "scheduler"
APPLY_CONCURRENCY = 64
DONE = frozenset({EvalStatus.COMPLETE, EvalStatus.FAILED, EvalStatus.CANCELED,
                  EvalStatus.DELETED, EvalStatus.BLOCKED})
"""An eval in one of these is not the broker's business (blocked ones wait to be
unblocked, which enqueues them again)."""
BLOCKING = frozenset({Trigger.QUEUED_ALLOCS, Trigger.MAX_PLAN_ATTEMPTS})


def advisory_subject(stream: str = EVENTS_STREAM, consumer: str = CONSUMER) -> str:
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"


class Scheduler:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner, config: Config,
                 *, now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 concurrency: int = 8) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.store = store
        self.projector = projector
        self.cfg = config.scheduler
        self.allocations = config.allocations
        self.now = now
        self.concurrency = concurrency
        self._stopping = False
        self.expected_alloc_version: Callable[[str], int] = (
            lambda node_id: self.projector.alloc_versions.get(node_id, 0))
        """The version a plan on ``node_id`` expects (tests make it stale to force conflicts)."""
        self._job_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._sub: Any = None
        self._advisories: Any = None
        self.processed = 0
        self.given_up = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        config = ConsumerConfig(
            durable_name=CONSUMER, filter_subjects=BROKER_SUBJECTS,
            ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=float(self.cfg.nack_timeout), max_deliver=self.cfg.delivery_limit,
            max_ack_pending=1000)
        await self.js.add_consumer(EVENTS_STREAM, config)
        self._sub = await self.js.pull_subscribe_bind(durable=CONSUMER, stream=EVENTS_STREAM)
        self._advisories = await self.nc.subscribe(advisory_subject(), cb=self._on_advisory)
        self._loop = asyncio.create_task(self._fetch_loop(), name="scheduler-broker")

    async def stop(self) -> None:
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sub in (self._sub, self._advisories):
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - closing anyway
                    pass

    async def _fetch_loop(self) -> None:
        # Stopped by the flag too: once the connection is closed, nats-py turns the
        # cancellation of a fetch into ConnectionClosedError, which looks like a retry.
        while not self._stopping and not self.nc.is_closed:
            try:
                msgs = await self._sub.fetch(batch=self.concurrency, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - timeout (nothing there) or reconnecting
                await asyncio.sleep(0.05)
                continue
            for msg in msgs:
                await self._slots.acquire()
                task = asyncio.create_task(self._deliver(msg))
                self._tasks.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    # ------------------------------------------------------------------ the broker
    async def _deliver(self, msg: Msg) -> None:
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            await msg.term()   # dead-lettered by the projector; never scheduled
            return
        if not isinstance(event, EvalCreated | EvalEnqueued):
            await msg.ack()
            return
        delivered = msg.metadata.num_delivered or 1
        try:
            await self.projector.wait_applied(msg.metadata.sequence.stream, timeout=30.0)
            view = self.projector.evals.get(event.eval_id)
            if view is None or view.status in DONE:
                await msg.ack()
                return
            delay = self._delay(view)
            if delay > 0:
                if view.status is EvalStatus.PENDING:
                    await self._append_eval(view, step(view, Step.DELAY, "delayed until "
                                                       f"{view.wait_until}", ACTOR))
                await msg.nak(delay=delay)
                return
            lock = self._job_locks[view.job_id]
            keepalive = asyncio.create_task(self._keep_alive(msg))
            try:
                async with lock:
                    keepalive.cancel()
                    # a worker stuck longer than the nack timeout counts as a failed delivery
                    await asyncio.wait_for(self.process(event.eval_id),
                                           timeout=float(self.cfg.nack_timeout))
            finally:
                keepalive.cancel()
            await msg.ack()
            self.processed += 1
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.warning("eval %s failed on delivery %d of %d: %r", event.eval_id, delivered,
                        self.cfg.delivery_limit, err)
            if delivered >= self.cfg.delivery_limit:
                try:
                    await self.give_up(event.eval_id, f"delivery limit reached: {err}")
                finally:
                    await msg.term()
            else:
                await msg.nak(delay=min(2.0 ** delivered, 30.0))

    async def _keep_alive(self, msg: Msg) -> None:
        """While the eval waits for its job's lock, tell the server it is not lost."""
        while True:
            await asyncio.sleep(max(1.0, float(self.cfg.nack_timeout) / 3))
            await msg.in_progress()

    def _delay(self, view: EvalView) -> float:
        if view.wait_until is None:
            return 0.0
        return max(0.0, (view.wait_until - self.now()).total_seconds())

    async def _on_advisory(self, msg: Msg) -> None:
        """A message the server stopped delivering (every worker died on it)."""
        try:
            seq = int(json.loads(msg.data)["stream_seq"])
            raw = await self.js.get_msg(EVENTS_STREAM, seq)
            event = bind_event(raw.subject or "", raw.data or b"")
        except Exception as err:  # noqa: BLE001 - a malformed advisory is only logged
            log.warning("cannot read max-deliveries advisory: %r", err)
            return
        if isinstance(event, EvalEvent):
            await self.give_up(event.eval_id, "delivery limit reached (undeliverable)")

    async def give_up(self, eval_id: str, reason: str) -> None:
        """Fail the eval (reaped if never dequeued) and create its failed-follow-up eval,
        delayed by ``failed_follow_up_delay``."""
        await self._catch_up()
        view = self.projector.evals.get(eval_id)
        if view is None or view.status in DONE:
            return
        if view.status is EvalStatus.APPLYING:
            view = await self._append_eval(view, step(view, Step.PLAN_FAILED, reason, ACTOR))
        if view.status is EvalStatus.DELAYED:
            view = await self._append_eval(view, step(view, Step.DEQUEUE, reason, ACTOR))
        how = Step.REAP_UNDELIVERABLE if view.status is EvalStatus.PENDING else Step.FAIL
        view = await self._append_eval(view, step(view, how, reason, ACTOR))
        wait_until = self.now() + timedelta(seconds=float(self.cfg.failed_follow_up_delay))
        await self._spawn(view, Trigger.FAILED_FOLLOW_UP, wait_until=wait_until)
        self.given_up += 1

    # ------------------------------------------------------------------ the worker
    async def process(self, eval_id: str) -> None:
        """Schedule one eval to a final (or blocked) status."""
        await self._catch_up()
        view = self.projector.evals[eval_id]
        if view.status in DONE:
            return
        newer = self._newer_pending(view)
        if newer is not None:
            await self._cancel(view, f"superseded by eval {newer}")
            return
        if view.status in (EvalStatus.PENDING, EvalStatus.DELAYED):
            view = await self._append_eval(view, step(view, Step.DEQUEUE, "", ACTOR))
        elif view.status is EvalStatus.APPLYING:   # a worker died while applying
            view = await self._append_eval(view, step(view, Step.PLAN_FAILED,
                                                      "resumed after redelivery", ACTOR))
        job = self.projector.jobs.get(view.job_id)
        if job is None:
            await self._append_eval(view, step(view, Step.FAIL, f"job {view.job_id} not found",
                                               ACTOR))
            return
        if job.status == "dead":
            await self._cancel_blocked(view.job_id, f"job {view.job_id} stopped")
        blocked_spawned = False
        placed_total = stopped_total = 0
        for attempt in range(1, self.cfg.max_plan_attempts + 1):
            if attempt > 1:
                await self._catch_up()
                job = self.projector.jobs.get(view.job_id) or job
            placed, unplaced, stops = self._plan(job)
            if unplaced and not placed and not stops and view.triggered_by in BLOCKING:
                await self._append_eval(view, step(
                    view, Step.REBLOCK, f"{len(unplaced)} allocation(s) still do not fit",
                    ACTOR))
                return
            if unplaced and not blocked_spawned:
                view = await self._spawn_blocked(view, Trigger.QUEUED_ALLOCS,
                                                 f"{len(unplaced)} allocation(s) do not fit")
                blocked_spawned = True
            if not placed and not stops:
                break
            view = await self._append_eval(view, step(
                view, Step.SUBMIT, f"{len(placed)} to place, {len(stops)} to stop", ACTOR))
            try:
                await self._apply(view, job, placed, stops)
            except ConflictError as err:
                log.info("eval %s: plan attempt %d/%d conflicted (%s)", view.id, attempt,
                         self.cfg.max_plan_attempts, err)
                view = await self._append_eval(view, step(view, Step.PLAN_FAILED, str(err),
                                                          ACTOR))
                continue
            placed_total, stopped_total = len(placed), len(stops)
            break
        else:
            view = await self._spawn_blocked(
                view, Trigger.MAX_PLAN_ATTEMPTS,
                f"plan conflicted {self.cfg.max_plan_attempts} times")
            await self._append_eval(view, step(view, Step.FAIL, "max plan attempts exceeded",
                                               ACTOR))
            return
        await self._append_eval(view, step(
            view, Step.PLACED, f"placed {placed_total}, stopped {stopped_total}", ACTOR))

    def _plan(self, job: JobView) -> tuple[list[Placement], list[Any], list[Stop]]:
        allocs = self.projector.allocs.values()
        mine = [a for a in allocs if a.job_id == job.id]
        wanted = reconcile(job, mine)
        caps = capacities(self.projector.nodes.values(), allocs)
        # draining nodes, and nodes whose conformance drifted, are used last
        draining = frozenset(n.id for n in self.projector.nodes.values()
                             if n.intent is Intent.DRAINING or n.drift)
        placed, unplaced = place(job.spec, wanted.place, caps, draining)
        return placed, unplaced, wanted.stop

    async def _apply(self, view: EvalView, job: JobView, placed: list[Placement],
                     stops: list[Stop]) -> None:
        by_node: dict[str, list[AllocEvent]] = defaultdict(list)
        for p in placed:
            by_node[p.node_id].append(AllocPlaced(
                node_id=p.node_id, alloc_id=new_id()[:20], job_id=job.id, eval_id=view.id,
                index=p.slot.index, command=list(job.spec.command),
                resources=job.spec.resources, job_version=job.job_version,
                requeue_count=p.slot.requeue_count, previous_alloc=p.slot.previous,
                actor=ACTOR, causation_id=view.id))
        for s in stops:
            by_node[s.alloc.node_id].append(AllocStopRequested(
                node_id=s.alloc.node_id, alloc_id=s.alloc.id, reason=s.reason,
                kill_timeout_s=float(self.allocations.kill_timeout), actor=ACTOR,
                causation_id=view.id))
        # Nodes are independent aggregates: their appends run side by side (pipelined),
        # each node's in order with its own expected version.
        gate = asyncio.Semaphore(APPLY_CONCURRENCY)

        async def on_node(node_id: str) -> int:
            async with gate:
                return await self.store.append_decided(by_node[node_id],
                                                       self.expected_alloc_version(node_id))

        results = await asyncio.gather(*(on_node(n) for n in sorted(by_node)),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        last = max((r for r in results if isinstance(r, int)), default=0)
        if last:
            await self.projector.wait_applied(last)

    def _newer_pending(self, view: EvalView) -> str | None:
        """A pending eval of the same job created after this one: it will do the same
        reconciliation on a newer state, so this one is superseded. (Blocked evals are
        never superseded: they stand for capacity the job still waits for.)"""
        if view.triggered_by in BLOCKING or view.created_at is None:
            return None
        for other in self.projector.evals.values():
            if (other.job_id == view.job_id and other.id != view.id
                    and other.status is EvalStatus.PENDING and other.created_at is not None
                    and other.created_at > view.created_at and self._delay(other) == 0):
                return other.id
        return None

    async def _cancel_blocked(self, job_id: str, reason: str) -> None:
        """blocked -- if no-op --> canceled: a stopped job waits for no capacity."""
        for other in list(self.projector.evals.values()):
            if other.job_id == job_id and other.status is EvalStatus.BLOCKED:
                try:
                    await self._append_eval(other, step(other, Step.NO_OP, reason, ACTOR))
                except ConflictError:
                    pass   # unblocked meanwhile: it will find the job stopped

    async def _cancel(self, view: EvalView, reason: str) -> None:
        if view.status is EvalStatus.PENDING:
            await self._append_eval(view, step(view, Step.NO_OP, reason, ACTOR))
            return
        if view.status is EvalStatus.DELAYED:
            view = await self._append_eval(view, step(view, Step.DEQUEUE, "", ACTOR))
        elif view.status is EvalStatus.APPLYING:
            view = await self._append_eval(view, step(view, Step.PLAN_FAILED, "", ACTOR))
        await self._append_eval(view, step(view, Step.CANCEL, reason, ACTOR))

    async def _spawn_blocked(self, view: EvalView, trigger: Trigger, reason: str) -> EvalView:
        """A new blocked eval for the job; older blocked evals of the job are duplicates."""
        old_blocked = [e for e in self.projector.evals.values()
                       if e.job_id == view.job_id and e.status is EvalStatus.BLOCKED
                       and e.id != view.id]
        view = await self._spawn(view, trigger, reason=reason)
        for dup in old_blocked:
            try:
                await self._append_eval(dup, step(dup, Step.REAP_DUPLICATE,
                                                  f"duplicate of blocked eval {view.blocked_eval}",
                                                  ACTOR))
            except ConflictError:
                pass   # it moved meanwhile (unblocked): not a duplicate any more
        return view

    async def _spawn(self, view: EvalView, trigger: Trigger, *, reason: str = "",
                     wait_until: datetime | None = None) -> EvalView:
        new = new_id()
        events = spawn(view, trigger, new, view.job_id, priority=view.priority,
                       wait_until=wait_until, actor=ACTOR)
        created, linked = events[0], events[1:]
        await self.store.append(created, expected_version=0)
        for event in linked:
            view = await self._append_eval(view, event)
        log.info("eval %s: new %s eval %s %s", view.id, trigger.value, new, reason)
        return view

    async def _append_eval(self, view: EvalView, event: EvalEvent) -> EvalView:
        seq = await self.store.append(event, expected_version=view.version)
        new = apply_eval(view, event, seq)
        assert new is not None
        return new

    async def _catch_up(self) -> None:
        await self.projector.catch_up()


def new_eval(trigger: Trigger, job: JobView, *, node_id: str | None = None,
             actor: str = ACTOR, causation: Event | None = None) -> EvalCreated:
    """A pending eval for a cluster event (the diagram's first arrow)."""
    [created] = spawn(None, trigger, new_id(), job.id, priority=job.spec.priority,
                      node_id=node_id, actor=actor)
    assert isinstance(created, EvalCreated)
    if causation is not None:
        from msgspec.structs import replace
        created = replace(created, causation_id=causation.event_id)
    return created

