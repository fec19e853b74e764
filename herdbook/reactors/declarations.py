"""Liveness declarations: what the sweeper found due for a node, decided and appended
through the decide runner (the transitions, apart from the timers that find them due).

A declaration that another writer beat is decided again at once from the newer view (the
runner). One whose append fails otherwise is retried after a delay that doubles per
failure of that node (``APPEND_RETRY``: 1 s doubling up to ``APPEND_RETRY_MAX``), logged on the
first only. While a declaration is in flight its node is not decided again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from herdbook.backoff import Backoff
from herdbook.clock import Clock
from herdbook.events.node import NodeEvent
from herdbook.events.subjects import printable
from herdbook.projector.node_view import NodeView
from herdbook.reactors import liveness
from herdbook.reactors.deadlines import Deadlines
from herdbook.reactors.decide_runner import DecideRunner, Decision, Reads

log = logging.getLogger(__name__)

APPEND_RETRY = Backoff(1.0, cap=60.0)
APPEND_RETRY_MAX = APPEND_RETRY.cap
"""A liveness append that fails (not a conflict) is retried after 1s, 2s, 4s ... 60s."""
IN_FLIGHT = 5.0
"""How long a declaration's node waits for the view to fold it before deciding again."""


class Declarations:
    def __init__(self, runner: DecideRunner, nodes: Mapping[str, NodeView], reads: Reads,
                 deadlines: Deadlines, clock: Clock,
                 decide: Callable[[NodeView | None, liveness.Observation],
                                  Decision[NodeEvent] | None]) -> None:
        """``decide``: the liveness decider with the configuration's timeouts and rules."""
        self.runner = runner
        self.nodes = nodes
        self.reads = reads
        self.deadlines = deadlines
        self.clock = clock
        self.decide = decide
        self.detections = 0
        self.backoff: dict[str, tuple[float, float]] = {}
        """node -> (delay, not before) after its last append failed"""
        self.inflight: dict[str, float] = {}
        """node -> when its declaration was sent"""
        self._tasks: set[asyncio.Task[None]] = set()

    def not_before(self, node_id: str, now: float) -> float | None:
        """When the node may be decided again, if not now: its last append failed, or
        its declaration is not folded yet."""
        backoff = self.backoff.get(node_id)
        if backoff is not None and now < backoff[1]:
            return backoff[1]
        sent = self.inflight.get(node_id)
        if sent is not None:
            if now - sent < IN_FLIGHT:
                return now + 0.2
            del self.inflight[node_id]
        return None

    def declare_due(self, node_id: str, view: NodeView, seen: liveness.Observation,
                    now: float) -> bool:
        """Start the declaration due for the node, if any; False: nothing is due."""
        decision = self.decide(view, seen)
        if decision is None or not decision.events:
            return False
        self.inflight[node_id] = now
        task = asyncio.create_task(self._declare(node_id, seen))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _declare(self, node_id: str, seen: liveness.Observation) -> None:
        retry_in = 0.0
        try:
            done = await self.runner.run(
                "node", node_id, lambda _: self.decide(self.nodes.get(node_id), seen),
                wait=False)
        except Exception as err:
            backoff = self.backoff.get(node_id)
            if backoff is None:
                log.error("liveness append for %s failed: %s; retrying with backoff (up to "
                          "%gs), logged again once it succeeds", printable(node_id),
                          printable(f"{type(err).__name__}: {err}"), APPEND_RETRY_MAX)
            retry_in = APPEND_RETRY.next(None if backoff is None else backoff[0])
            self.backoff[node_id] = (retry_in, self.clock.monotonic() + retry_in)
        else:
            self.detections += len(done.events)
            if self.backoff.pop(node_id, None) is not None:
                log.info("liveness append for %s succeeded again", printable(node_id))
            if done.events:
                try:
                    await self.reads.wait_applied(done.seq, timeout=IN_FLIGHT)
                except Exception as err:  # noqa: BLE001 - decided again from the view as it is
                    log.debug("%s: the view has not folded %d yet (%s)", printable(node_id),
                              done.seq, type(err).__name__)
        finally:
            self.inflight.pop(node_id, None)
            if node_id in self.nodes:
                self.deadlines.push(self.clock.monotonic() + retry_in, node_id)

    def forget(self, node_id: str) -> None:
        self.inflight.pop(node_id, None)
        self.backoff.pop(node_id, None)

    async def stop(self) -> None:
        tasks: list[Any] = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass
