"""The evaluation broker (DESIGN §6, Nomad's ``eval_broker.go``): a durable JetStream
consumer on ``herd.eval.*.created`` and ``herd.eval.*.enqueued`` (unblocked or retried
evals) that hands each eval to the worker.

- ``ack_wait`` = ``scheduler.nack_timeout``: a worker that dies mid-eval loses it to
  redelivery; ``max_deliver`` = ``scheduler.delivery_limit``: after the last delivery
  fails, the worker gives the eval up (fails it and creates a delayed failed-follow-up
  eval); the same happens on the server's max-deliveries advisory, for a worker that
  crashed every time;
- a delayed eval (``wait_until`` in the future) is marked delayed and nak'ed with that
  delay;
- one eval per job at a time: a per-job lock, the waiting message kept alive with
  ``in_progress``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from herdbook.clock import Clock
from herdbook.config import SchedulerConfig
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.eval_events import EvalCreated, EvalEnqueued, EvalEvent
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.eval_deciders import DONE, delay_of

log = logging.getLogger(__name__)

CONSUMER = "herd-scheduler"
BROKER_SUBJECTS = ["herd.eval.*.created", "herd.eval.*.enqueued"]


def advisory_subject(stream: str = EVENTS_STREAM, consumer: str = CONSUMER) -> str:
    return f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{stream}.{consumer}"


class Worker(Protocol):
    """What the broker hands an eval to."""

    async def process(self, eval_id: str) -> None:
        """Schedule the eval to a final (or blocked) status."""

    async def delay(self, eval_id: str) -> None:
        """Mark a pending eval delayed (its ``wait_until`` is ahead)."""

    async def give_up(self, eval_id: str, reason: str) -> None:
        """Its last delivery failed."""


class EvalBroker:
    def __init__(self, nc: NATS, projector: ProjectorRunner, cfg: SchedulerConfig,
                 worker: Worker, clock: Clock, *, concurrency: int = 8) -> None:
        self.nc = nc
        self.projector = projector
        self.cfg = cfg
        self.worker = worker
        self.clock = clock
        self.concurrency = concurrency
        self._stopping = False
        self._job_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._slots = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._js: Any = None
        self._sub: Any = None
        self._advisories: Any = None
        self.processed = 0

    async def start(self) -> None:
        self._js = self.nc.jetstream()
        await self._bind()
        self._advisories = await self.nc.subscribe(advisory_subject(), cb=self._on_advisory)
        self._loop = asyncio.create_task(self._fetch_loop(), name="scheduler-broker")

    async def _bind(self) -> None:
        """Create the durable consumer (or find it: the same config is no change) and
        pull from it."""
        config = ConsumerConfig(
            durable_name=CONSUMER, filter_subjects=BROKER_SUBJECTS,
            ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=float(self.cfg.nack_timeout), max_deliver=self.cfg.delivery_limit,
            max_ack_pending=1000)
        await self._js.add_consumer(EVENTS_STREAM, config)
        self._sub = await self._js.pull_subscribe_bind(durable=CONSUMER, stream=EVENTS_STREAM)

    async def _bind_again_if_gone(self) -> None:
        """A fetch failed otherwise than finding nothing: if the consumer is gone (its
        stream was deleted from outside and created again, which takes the consumer with
        it), create it again; a fetch on it only ever answered "no responders", and no
        eval was scheduled until a restart."""
        try:
            await self._js.consumer_info(EVENTS_STREAM, CONSUMER)
            return
        except NotFoundError:
            pass
        except Exception:  # noqa: BLE001 - reconnecting: the next failed fetch asks again
            return
        old = self._sub
        try:
            await self._bind()
        except Exception as err:  # noqa: BLE001 - the stream not back yet: next time
            log.debug("the scheduler's consumer cannot be created yet: %s", err)
            return
        log.warning("the scheduler's consumer %s on %s was gone (the stream deleted from "
                    "outside?): created it again", CONSUMER, EVENTS_STREAM)
        try:
            await old.unsubscribe()
        except Exception:  # noqa: BLE001 - its consumer is gone anyway
            pass

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
            except TimeoutError:   # nothing there
                await asyncio.sleep(0.05)
                continue
            except Exception:  # noqa: BLE001 - reconnecting, or the consumer is gone
                await self._bind_again_if_gone()
                await asyncio.sleep(0.5)
                continue
            for msg in msgs:
                await self._slots.acquire()
                task = asyncio.create_task(self._deliver(msg))
                self._tasks.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

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
            delay = delay_of(view, self.clock.now())
            if delay > 0:
                await self.worker.delay(view.id)
                await msg.nak(delay=delay)
                return
            keepalive = asyncio.create_task(self._keep_alive(msg))
            try:
                async with self._job_locks[view.job_id]:
                    keepalive.cancel()
                    # a worker stuck longer than the nack timeout counts as a failed delivery
                    await asyncio.wait_for(self.worker.process(event.eval_id),
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
                    await self.worker.give_up(event.eval_id, f"delivery limit reached: {err}")
                finally:
                    await msg.term()
            else:
                await msg.nak(delay=min(2.0 ** delivered, 30.0))

    async def _keep_alive(self, msg: Msg) -> None:
        """While the eval waits for its job's lock, tell the server it is not lost."""
        while True:
            await asyncio.sleep(max(1.0, float(self.cfg.nack_timeout) / 3))
            await msg.in_progress()

    async def _on_advisory(self, msg: Msg) -> None:
        """A message the server stopped delivering (every worker died on it)."""
        try:
            seq = int(json.loads(msg.data)["stream_seq"])
            raw = await self._js.get_msg(EVENTS_STREAM, seq)
            event = bind_event(raw.subject or "", raw.data or b"")
        except Exception as err:  # noqa: BLE001 - a malformed advisory is only logged
            log.warning("cannot read max-deliveries advisory: %r", err)
            return
        if isinstance(event, EvalEvent):
            await self.worker.give_up(event.eval_id, "delivery limit reached (undeliverable)")
