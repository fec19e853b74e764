"""Notifiers tell the workload system (Kubernetes, Slurm, ...) about cordon, uncordon, drain
and undrain (Navarch), and cordon there a node the health policy makes UNHEALTHY: a webhook,
a command or Slurm's scontrol (``slurm.py``), retried with backoff. A notification that
fails every retry is an event (``node.notification_failed``), shown by ``describe``. When a
drain-status source is configured, DRAINED waits for it to say drained.

The notifier runs on the leader only (a ``PerTerm`` part): one replica sends each
notification.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Callable
from typing import Any

from herdbook.clock import SYSTEM_CLOCK, Clock
from herdbook.config import NotifierConfig
from herdbook.events.codec import AnyEvent
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import (
    NodeCordoned,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeNotificationFailed,
    NodeUncordoned,
    NodeUndrained,
)
from herdbook.events.states import Health, Intent
from herdbook.events.store import EventStore
from herdbook.projector.node_view import NodeView
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.runner import DecideRunner, Decision
from herdbook.reactors.slurm import Slurm

log = logging.getLogger(__name__)
ACTOR = "notifier"

ACTIONS: dict[type, str] = {NodeCordoned: "cordon", NodeUncordoned: "uncordon",
                            NodeDrainStarted: "drain", NodeUndrained: "undrain"}


def action_for(event: AnyEvent | NodeEvent) -> str | None:
    """Which notification an event calls for, if any. A node the health policy makes
    UNHEALTHY is cordoned in the workload system too (herdbook places nothing on it; Slurm
    or Kubernetes must not either); the operator's ``uncordon`` that clears it uncordons
    it there."""
    if isinstance(event, NodeHealthChanged):
        return "cordon" if event.health is Health.UNHEALTHY else None
    return ACTIONS.get(type(event))


def reason_for(event: AnyEvent | NodeEvent) -> str:
    reason = str(getattr(event, "reason", ""))
    return f"unhealthy: {reason}" if isinstance(event, NodeHealthChanged) else reason


def has_drain_status(config: NotifierConfig) -> bool:
    return ((config.type == "webhook" and config.webhook.drain_status_url is not None)
            or (config.type == "exec" and config.exec.drain_status is not None)
            or (config.type == "slurm" and config.slurm.drain_status))


def decide_failed(view: NodeView | None, action: str, error: str,
                  attempts: int) -> Decision[NodeEvent] | None:
    """A notification failed every attempt: recorded on the node, if it still exists."""
    if view is None:
        return None
    return Decision(view.version, [NodeNotificationFailed(
        node_id=view.id, action=action, reason=error[:500], attempts=attempts, actor=ACTOR)])


def decide_drained(view: NodeView | None, message: str) -> Decision[NodeEvent] | None:
    """The workload system reports the node drained: DRAINED, if it is still draining."""
    if view is None or view.intent is not Intent.DRAINING:
        return None
    return Decision(view.version, [NodeDrained(
        node_id=view.id, actor=ACTOR,
        reason=message or "the workload system reports it drained")])


class Notifier:
    def __init__(self, config: NotifierConfig, store: EventStore,
                 projector: ProjectorRunner, *, clock: Clock = SYSTEM_CLOCK,
                 runner: DecideRunner | None = None) -> None:
        self.config = config
        self._unsubscribe: Callable[[], None] | None = None
        self.runner = runner or DecideRunner(store, projector, clock)
        self.clock = clock
        self.projector = projector
        self.sent = 0
        self.failed = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._poller: asyncio.Task[None] | None = None
        self._client: Any = None
        self._slurm = Slurm(config.slurm) if config.type == "slurm" else None

    async def start(self) -> None:
        if self.config.type == "none":
            return
        if self.config.type == "webhook":
            import httpx
            self._client = httpx.AsyncClient(timeout=float(self.config.webhook.timeout),
                                             headers=dict(self.config.webhook.headers))
        self._unsubscribe = self.projector.nodes.subscribe(self._on_change)
        if has_drain_status(self.config):
            self._poller = asyncio.create_task(self._poll_drain_status())

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in [*self._tasks, *([self._poller] if self._poller else [])]:
            task.cancel()
        if self._client is not None:
            await self._client.aclose()

    def _on_change(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        action = action_for(event)
        if action is None or view is None:
            return
        task = asyncio.create_task(self.notify(action, node_id, reason_for(event)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def notify(self, action: str, node_id: str, reason: str) -> bool:
        attempts = self.config.retries + 1
        error = ""
        for attempt in range(attempts):
            try:
                await self._send(action, node_id, reason)
                self.sent += 1
                log.info("notified %s of %s", action, node_id)
                return True
            except Exception as err:  # noqa: BLE001 - any failure is retried, then recorded
                error = str(err) or type(err).__name__
                log.warning("%s notification for %s failed (%d/%d): %s", action, node_id,
                            attempt + 1, attempts, error)
                if attempt + 1 < attempts:
                    await asyncio.sleep(float(self.config.backoff) * 2 ** attempt)
        self.failed += 1
        await self.runner.run("node", node_id, lambda _: decide_failed(
            self.projector.nodes.get(node_id), action, error, attempts))
        return False

    async def _send(self, action: str, node_id: str, reason: str) -> None:
        if self.config.type == "webhook":
            url = getattr(self.config.webhook, f"{action}_url")
            if url is None:
                return
            body = {"event": action, "node_id": node_id, "reason": reason,
                    "timestamp": self.clock.now().isoformat().replace("+00:00", "Z")}
            response = await self._client.post(url, json=body)
            if response.status_code >= 400:
                raise RuntimeError(f"{url} answered {response.status_code}")
        elif self.config.type == "exec":
            template = getattr(self.config.exec, action)
            if template is None:
                return
            await self._run(template, node_id, reason)
        elif self._slurm is not None:
            await self._slurm.update(action, self._slurm_name(node_id), reason)

    def _slurm_name(self, node_id: str) -> str:
        assert self._slurm is not None
        view = self.projector.nodes.get(node_id)
        return self._slurm.name(node_id, view.info.labels if view is not None else {})

    async def _run(self, template: str, node_id: str, reason: str) -> str:
        command = template.format(node_id=shlex.quote(node_id), reason=shlex.quote(reason))
        proc = await asyncio.create_subprocess_shell(
            command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(),
                                            float(self.config.exec.timeout))
        except TimeoutError:
            proc.kill()
            raise RuntimeError(f"`{command}` timed out") from None
        if proc.returncode != 0:
            raise RuntimeError(f"`{command}` exited {proc.returncode}: "
                               f"{out.decode(errors='replace').strip()[:200]}")
        return out.decode(errors="replace")

    async def drained(self, node_id: str) -> tuple[bool, str]:
        """Ask the drain-status source whether the workload system drained the node."""
        if self.config.type == "webhook":
            response = await self._client.get(self.config.webhook.drain_status_url,
                                               params={"node_id": node_id})
            response.raise_for_status()
            body = response.json()
            return bool(body.get("drained")), str(body.get("message", ""))
        if self._slurm is not None:
            return await self._slurm.drained(self._slurm_name(node_id))
        template = self.config.exec.drain_status
        assert template is not None
        try:
            out = await self._run(template, node_id, "")
        except RuntimeError as err:
            return False, str(err)
        return True, out.strip()[:200]

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
