"""Auto-approval (``approval.auto_approve``): a PENDING node is approved as soon as its
view shows it, through the one decide runner."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from herdbook.events.node import NodeEvent
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner, Decision
from herdbook.reactors.membership import decide_auto_approve

log = logging.getLogger(__name__)


def decide_approval(view: NodeView | None, enabled: bool) -> Decision[NodeEvent] | None:
    """The approval due for the node as it is now (none for a node that is gone)."""
    if view is None:
        return None
    return Decision(view.version, decide_auto_approve(view, enabled))


class AutoApprover:
    def __init__(self, projector: ProjectorRunner, enabled: bool, *,
                 runner: DecideRunner) -> None:
        self.runner = runner
        self.projector = projector
        self.enabled = enabled
        self._unsubscribe: Callable[[], None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._inflight: set[str] = set()

    def start(self) -> None:
        if not self.enabled:
            return
        self._unsubscribe = self.projector.nodes.subscribe(self._on_change)
        for node_id, view in list(self.projector.nodes.items()):
            self._on_change(node_id, view, None)

    def _on_change(self, node_id: str, view: NodeView | None, event: NodeEvent | None) -> None:
        decision = decide_approval(view, self.enabled)
        if node_id in self._inflight or decision is None or not decision.events:
            return
        self._inflight.add(node_id)
        task = asyncio.create_task(self.approve(node_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def approve(self, node_id: str) -> None:
        """Decide on the latest view; the runner decides again after a conflict (the
        agent appended its boot check meanwhile, say)."""
        try:
            await self.runner.run("node", node_id, lambda _: decide_approval(
                self.projector.nodes.get(node_id), self.enabled))
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

