"""Notifiers tell the workload system (Kubernetes, Slurm, ...) about cordon, uncordon, drain
and undrain (Navarch), and cordon there a node the health policy makes UNHEALTHY: a webhook,
a command or Slurm's scontrol (``slurm.py``), retried with backoff. A notification that
fails every retry is an event (``node.notification_failed``), shown by ``describe``. When a
drain-status source is configured, DRAINED waits for it to say drained.

The notifier runs on the leader only (a ``PerTerm`` part): one replica sends each
notification. It resumes where the last leader stopped: its position in HERD_EVENTS is
committed to the KV key ``herd_positions.notifier`` (``events/positions.py``) after each
notification is done (sent, or its failure recorded), and a new leader (or a restarted
one) first acts on the node events after that position, read from the log, then on the
changes the projector folds. So a cordon folded while no replica led reaches the
workload system once the next leader starts.

Delivery is at least once: a leader killed between a delivery and its commit has the
next leader send it again. Each notification carries the id of the event that called for
it (``Idempotency-Key`` header and ``event_id`` in a webhook's body, ``HERD_EVENT_ID`` in
a command's environment), the same on every resend, so a receiver drops a repeat; Slurm's
DRAIN and RESUME are idempotent themselves. Notifications of one node are sent in the
order of its events.

With the validation gate on, the workload system follows it (``notifier_deciders``): a
node the gate holds is cordoned there and resumed only at ``node.validated``. Which
notification an event calls for is decided from the node's view right after it when
following the changes; after a takeover, the events the last leader left undone are
decided against the view as it is then, so the workload system ends where the log ends.

Beside it, by responsibility: ``notifier_deciders.py``, the pure part (which notification
an event calls for, the failed and drained decisions); ``notification_sender.py``, one
attempt to reach the workload system and the drain-status question.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from herdbook.backoff import Backoff
from herdbook.clock import Clock
from herdbook.config import NotifierConfig, ValidationConfig
from herdbook.events.codec import AnyEvent
from herdbook.events.node import NodeEvent
from herdbook.events.states import Intent
from herdbook.events.subjects import printable
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notification_sender import NotificationSender
from herdbook.reactors.notifier_deciders import (
    action_for,
    decide_drained,
    decide_failed,
    reason_for,
    recommended_for,
)
from herdbook.reactors.tracking import Progress

log = logging.getLogger(__name__)
COMMIT_INTERVAL = 5.0
"""How often the position moves past node events that called for nothing (a notification
done commits at once): a restart then re-reads at most this much of the log."""
RETRY_READ = 2.0
STOP_COMMIT_TIMEOUT = 2.0


def has_drain_status(config: NotifierConfig) -> bool:
    return ((config.type == "webhook" and config.webhook.drain_status_url is not None)
            or (config.type == "exec" and config.exec.drain_status is not None)
            or (config.type == "slurm" and config.slurm.drain_status))


class CommittedPosition(Protocol):
    """Where the notifier's position is kept (``events.positions.KvPosition``)."""

    async def read(self) -> int | None: ...

    async def commit(self, seq: int) -> int: ...

    async def reset(self, seq: int) -> None: ...


EventLog = Callable[[int, int, Callable[[int, AnyEvent], None]], Awaitable[None]]
"""``(after, through, on_event)``: the node events stored after ``after`` up to
``through``, in order (``reactors.tracking.node_events``)."""


class Notifier:
    def __init__(self, config: NotifierConfig, projector: ProjectorRunner, *, clock: Clock,
                 runner: DecideRunner, position: CommittedPosition | None = None,
                 events: EventLog | None = None,
                 validation: ValidationConfig | None = None) -> None:
        """``position`` and ``events``: where the position is committed and the log it
        resumes from (both, or neither: then it follows the changes from its start on,
        as a test of one notification wants). ``validation``: the gate the workload
        system follows (None, or one not ``enabled``: no gate)."""
        self.config = config
        self.validation = validation if validation is not None and validation.enabled else None
        self._unsubscribe: Callable[[], None] | None = None
        self.runner = runner
        self.clock = clock
        self.projector = projector
        self.sent = 0
        self.failed = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._poller: asyncio.Task[None] | None = None
        self.sender = NotificationSender(config, projector, clock=clock)
        self.position = position
        self.events = events
        self.progress: Progress | None = None
        """None until the position is read and the log after it is dispatched."""
        self.committed = 0
        """The position last committed (or read)."""
        self._resuming = False
        self._reset = False
        """The stored position is past the log's end: the next commit replaces it."""
        self._waiting: list[tuple[int, NodeEvent, NodeView]] = []
        """Changes folded while resuming, dispatched after the log's."""
        self._last: dict[str, asyncio.Task[Any]] = {}
        """Per node, its latest notification: the next one waits for it (order)."""
        self._commit_now = asyncio.Event()
        self._commit_failing = False
        self._background: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        if self.config.type == "none":
            return
        self.sender.open()
        # Subscribed first, at a point the view has folded ``through``: what comes after
        # is told to ``_on_change``; the log up to it is read by ``_resume``.
        self._unsubscribe = self.projector.nodes.subscribe(self._on_change)
        if self.position is not None and self.events is not None:
            self._resuming = True
            through = self.projector.folded_seq
            self._background += [
                asyncio.create_task(self._resume(through), name="notifier-resume"),
                asyncio.create_task(self._commit_loop(), name="notifier-commit")]
        else:
            self.progress = Progress(0)
        if has_drain_status(self.config):
            self._poller = asyncio.create_task(self._poll_drain_status())

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        tasks = [*self._tasks, *self._background, *([self._poller] if self._poller else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # What was done is committed now (not in 5 s): the next leader sends none of it
        # again. What was cancelled mid-way is not: the next leader sends it.
        if self.position is not None and self.progress is not None:
            try:
                await asyncio.wait_for(self._commit(), STOP_COMMIT_TIMEOUT)
            except Exception:  # noqa: BLE001 - logged by _commit, or slow: sent again
                pass
        await self.sender.close()

    # following the log -----------------------------------------------------------------
    def _on_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        if view is None:
            return   # deleted: nothing to notify (and no sequence to pass)
        seq = view.version   # the fold sets it to the sequence of the event just folded
        if self._resuming:
            if action_for(event, view, self.validation) is not None:
                self._waiting.append((seq, event, view))
            return
        self._take(seq, event, view)

    def _take(self, seq: int, event: AnyEvent | NodeEvent,
              view: NodeView | None = None) -> None:
        """Node event ``seq``: notified if it calls for it and the node still exists;
        each sequence once, whether it comes from the log or the live view. ``view``:
        the node right after the event (None, from the log: the view now)."""
        assert self.progress is not None
        if not self.progress.see(seq):
            return
        node_id = str(getattr(event, "node_id", ""))
        now = self.projector.nodes.get(node_id)
        if now is None:
            return
        view = view if view is not None else now
        action = action_for(event, view, self.validation)
        if action is None:
            return
        self.progress.begin(seq)
        previous = self._last.get(node_id)
        task = asyncio.create_task(self._deliver(previous, seq, action, node_id,
                                                 reason_for(event, view), event.event_id,
                                                 recommended_for(event)))
        self._last[node_id] = task
        self._tasks.add(task)

        def done(task: asyncio.Task[Any]) -> None:
            self._tasks.discard(task)
            if self._last.get(node_id) is task:
                del self._last[node_id]
        task.add_done_callback(done)

    async def _deliver(self, previous: asyncio.Task[Any] | None, seq: int, action: str,
                       node_id: str, reason: str, key: str,
                       recommended: str | None = None) -> None:
        if previous is not None:
            await asyncio.wait([previous])   # one node's notifications in its events' order
        try:
            await self.notify(action, node_id, reason, key=key, seq=seq,
                              recommended=recommended)
        except Exception as err:  # noqa: BLE001 - recording the failure failed: said, passed
            log.error("%s notification for %s (event %s): recording its failure failed: %s",
                      action, printable(node_id), seq, printable(str(err)))
        assert self.progress is not None
        self.progress.end(seq)
        self._commit_now.set()

    async def _resume(self, through: int) -> None:
        """Read the committed position, act on the node events after it up to
        ``through`` (what the view had folded at the start), then on what was folded
        since."""
        assert self.position is not None and self.events is not None
        stored = await self._read_position()
        if stored is None:
            log.info("no notifier position stored: notifying from HERD_EVENTS sequence %d on",
                     through + 1)
            start = through
        elif stored > through:
            log.warning("the notifier's position (%d) is past HERD_EVENTS' end (%d): the "
                        "stream was recreated; notifying from %d on", stored, through,
                        through + 1)
            start = through
            self._reset = True
        else:
            start = stored
        # None stored: the first commit stores where this start began
        self.committed = start if stored is not None else -1
        self.progress = Progress(start)
        if start < through:
            log.info("notifier resuming after HERD_EVENTS sequence %d (through %d)",
                     start, through)
            await self.events(start, through, self._take)
        # The changes folded meanwhile, after the log's: each sequence once (``see``).
        self._resuming = False
        waiting, self._waiting = self._waiting, []
        for seq, event, view in waiting:
            self._take(seq, event, view)
        if stored is None or stored > through:
            self._commit_now.set()   # the position to resume from next time

    async def _read_position(self) -> int | None:
        assert self.position is not None
        failing = False
        while True:
            try:
                stored = await self.position.read()
            except Exception as err:  # noqa: BLE001 - NATS away or the bucket gone: again
                if not failing:
                    log.warning("cannot read the notifier's position (retrying every %.0fs;"
                                " changes wait): %s", RETRY_READ, printable(str(err)))
                failing = True
                await asyncio.sleep(RETRY_READ)
                continue
            if failing:
                log.warning("the notifier's position is readable again")
            return stored

    async def _commit_loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._commit_now.wait(), COMMIT_INTERVAL)
            except TimeoutError:
                pass
            self._commit_now.clear()
            try:
                await self._commit()
            except Exception:  # noqa: BLE001 - logged by _commit: the next round tries again
                pass

    async def _commit(self) -> None:
        if self.progress is None or self.position is None:
            return
        seq = self.progress.committable
        if seq <= self.committed and not self._reset:
            return
        try:
            if self._reset:
                await self.position.reset(seq)
                self._reset = False
                self.committed = seq
            else:
                self.committed = max(seq, await self.position.commit(seq))
        except Exception as err:
            if not self._commit_failing:   # once while it lasts (NATS away: every round)
                log.warning("cannot commit the notifier's position %d (a new leader would "
                            "notify again what came after %d; retrying): %s", seq,
                            self.committed, printable(str(err)))
            self._commit_failing = True
            raise
        if self._commit_failing:
            self._commit_failing = False
            log.warning("the notifier's position is committed again (%d)", self.committed)

    async def notify(self, action: str, node_id: str, reason: str, *, key: str = "",
                     seq: int = 0, recommended: str | None = None) -> bool:
        """Send one notification (retried), or record that it failed. ``key``: the id of
        the event that called for it, sent as the idempotency key; ``seq``: its
        HERD_EVENTS sequence; ``recommended``: a health verdict's recommended action."""
        attempts = self.config.retries + 1
        delays = Backoff(float(self.config.backoff), factor=2.0).delays()   # uncapped
        error = ""
        for attempt in range(attempts):
            try:
                await self.sender.send(action, node_id, reason, key, seq, recommended)
                self.sent += 1
                log.info("notified %s of %s", action, node_id)
                return True
            except Exception as err:  # noqa: BLE001 - any failure is retried, then recorded
                error = str(err) or type(err).__name__
                log.warning("%s notification for %s failed (%d/%d): %s", action, node_id,
                            attempt + 1, attempts, error)
                if attempt + 1 < attempts:
                    await asyncio.sleep(next(delays))
        self.failed += 1
        await self.runner.run("node", node_id, lambda _: decide_failed(
            self.projector.nodes.get(node_id), action, error, attempts))
        return False

    async def drained(self, node_id: str) -> tuple[bool, str]:
        """Ask the drain-status source whether the workload system drained the node."""
        return await self.sender.drained(node_id)

    async def _poll_drain_status(self) -> None:
        while True:
            await asyncio.sleep(float(self.config.drain_status_interval))
            started = self.clock.monotonic()
            for view in [v for v in self.projector.nodes.values()
                         if v.intent is Intent.DRAINING]:
                try:
                    done, message = await self.drained(view.id)
                except Exception as err:  # noqa: BLE001 - ask again next round
                    log.warning("drain status of %s unknown: %s", view.id, err)
                    continue
                if done:
                    await self.mark_drained(view.id, message)
            log.debug("drain status round took %.2fs", self.clock.monotonic() - started)

    async def mark_drained(self, node_id: str, message: str) -> None:
        try:
            await self.runner.run("node", node_id, lambda _: decide_drained(
                self.projector.nodes.get(node_id), message))
        except Exception as err:  # noqa: BLE001 - asked again next round
            log.warning("recording %s drained failed: %s", node_id, err)
