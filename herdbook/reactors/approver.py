"""Runs ``decide_auto_approve`` on every node view change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from herdbook.events.node import NodeEvent
from herdbook.events.store import ConflictError, EventStore
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.membership import decide_auto_approve

log = logging.getLogger(__name__)


class AutoApprover:
    def __init__(self, store: EventStore, projector: ProjectorRunner, enabled: bool) -> None:
        self.store = store
        self._unsubscribe: Callable[[], None] | None = None
        self.projector = projector
        self.enabled = enabled
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight: set[str] = set()

    def start(self) -> None:
        if not self.enabled:
            return
        self._unsubscribe = self.projector.nodes.subscribe(self._on_change)
        for node_id, view in list(self.projector.nodes.items()):
            self._on_change(node_id, view, None)

    def _on_change(self, node_id: str, view: NodeView | None, event: NodeEvent | None) -> None:
        if view is None or node_id in self._inflight:
            return
        events = decide_auto_approve(view, self.enabled)
        if events:
            self._inflight.add(node_id)
            task = asyncio.create_task(self._approve(node_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _approve(self, node_id: str) -> None:
        """Decide on the latest view; after a conflict (the agent appended its boot check
        meanwhile, say) catch up and decide again."""
        try:
            for _ in range(10):
                view = self.projector.nodes.get(node_id)
                events: list[NodeEvent] = (decide_auto_approve(view, self.enabled)
                                           if view is not None else [])
                if not events or view is None:
                    return
                try:
                    await self.store.append_decided(events, view.version)
                    return
                except ConflictError:
                    latest = await self.store.last_sequence("node", node_id)
                    await self.projector.wait_applied(latest)
        except Exception:
            log.exception("auto-approve of %s failed", node_id)
        finally:
            self._inflight.discard(node_id)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in list(self._tasks):
            task.cancel()
