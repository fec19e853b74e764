"""The health classifier: reads HERD_HEALTH, classifies each report with the CEL policy,
appends health changes (and DOWN on a fatal event) with optimistic concurrency.

Its position in HERD_HEALTH is kept in ``<data-dir>/health.position`` so reports that
arrive while the control plane is down are classified when it comes back.

A report counts only if its subject vouches for it (``herd.health.<id>`` with a valid id
the body names, valid ids in the body: ``events.authority``); anything else, undecodable bodies included, is
dead-lettered to ``herd.deadletter.HERD_HEALTH`` and counted. Reports of nodes not in the
view keep no state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.authority import bind_node_report, check_ids
from herdbook.events.codec import decode_health_report
from herdbook.events.deadletters import DeadLetters
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.node import NodeEvent
from herdbook.events.states import Health
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import HEALTH_STREAM
from herdbook.files import write_atomic
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.health import decide_health
from herdbook.reactors.health_policy import Policy

log = logging.getLogger(__name__)


class HealthClassifier:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner, policy: Policy,
                 threshold: int, position_file: Path,
                 pool_thresholds: dict[str, int] | None = None) -> None:
        self.nc = nc
        self._unsubscribe: Callable[[], None] | None = None
        self.store = store
        self.projector = projector
        self.policy = policy
        self.threshold = threshold
        self.pool_thresholds = pool_thresholds or {}
        self.position_file = position_file
        self.unhealthy_in_a_row: dict[str, int] = {}
        self.reports = 0
        self.dead_letters = DeadLetters(nc, HEALTH_STREAM, logger=log)
        self._position = 0
        self._saved = 0
        self._feed: StreamFeed | None = None
        self._saver: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            self._position = self._saved = int(self.position_file.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            self._position = self._saved = 0
        self._unsubscribe = self.projector.nodes.subscribe(self._on_view_change)
        self._feed = StreamFeed(self.nc, HEALTH_STREAM, "herd.health.*", self._position + 1,
                                self._on_report, batch=500)
        await self._feed.start()
        self._saver = asyncio.create_task(self._save_loop())

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._feed is not None:
            await self._feed.stop()
        if self._saver is not None:
            self._saver.cancel()
        self._save()

    def _save(self) -> None:
        if self._position != self._saved:
            write_atomic(self.position_file, f"{self._position}\n")
            self._saved = self._position

    async def _save_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._save()

    @property
    def deadlettered(self) -> int:
        return self.dead_letters.count

    def _on_view_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        # An operator cleared UNHEALTHY (uncordon/enable): counting starts again.
        if view is None or view.health is Health.UNKNOWN:
            self.unhealthy_in_a_row.pop(node_id, None)

    async def _on_report(self, msg: Msg) -> None:
        seq = stream_seq(msg)
        try:
            report = decode_health_report(msg.data)
            bind_node_report(msg.subject, report.node_id)
            check_ids(report)
        except Exception as err:  # noqa: BLE001 - any garbage, RecursionError included
            await self.dead_letters.send(msg, f"{type(err).__name__}: {err}")
            self._position = seq
            return
        self.reports += 1
        verdict = self.policy.classify(report)
        for _ in range(5):
            view = self.projector.nodes.get(report.node_id)
            if view is None:
                break
            count = self.unhealthy_in_a_row.get(report.node_id, 0)
            threshold = self.pool_thresholds.get(view.info.labels.get("pool", ""),
                                                 self.threshold)
            events, count = decide_health(view, verdict, count, threshold, report.report_id)
            try:
                version = await self.store.append_decided(events, view.version)
                if events:
                    await self.projector.wait_applied(version)
            except ConflictError:
                latest = await self.store.last_sequence("node", report.node_id)
                await self.projector.wait_applied(latest)
                continue
            self.unhealthy_in_a_row[report.node_id] = count
            break
        self._position = seq
