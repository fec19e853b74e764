"""How a notification reaches the workload system, one attempt: a webhook (POST, the
event's id as the ``Idempotency-Key`` header), a command (``HERD_EVENT_ID`` in its
environment) or Slurm's scontrol (``slurm.py``); and the drain-status source asked whether
a node is drained. Retries, ordering and the committed position are ``notifier.py``'s."""

from __future__ import annotations

import asyncio
import os
import shlex
from typing import Any

import aiohttp

from herdbook.clock import Clock
from herdbook.config import NotifierConfig
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.slurm import Slurm

IDEMPOTENCY_HEADER = "Idempotency-Key"


class NotificationSender:
    def __init__(self, config: NotifierConfig, projector: ProjectorRunner, *,
                 clock: Clock) -> None:
        self.config = config
        self.projector = projector
        self.clock = clock
        self._client: aiohttp.ClientSession | None = None
        """The webhook's HTTP client: one session (its connection pool) per notifier."""
        self._slurm = Slurm(config.slurm) if config.type == "slurm" else None

    def open(self) -> None:
        if self.config.type == "webhook":
            # aiohttp serves the API already: its client spares a second HTTP stack.
            self._client = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=float(self.config.webhook.timeout)),
                headers=dict(self.config.webhook.headers))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def send(self, action: str, node_id: str, reason: str, key: str = "",
                   seq: int = 0, recommended: str | None = None) -> None:
        """One attempt; raises if the workload system did not take it."""
        if self.config.type == "webhook":
            url = getattr(self.config.webhook, f"{action}_url")
            if url is None:
                return
            body: dict[str, Any] = {
                "event": action, "node_id": node_id, "reason": reason,
                "timestamp": self.clock.now().isoformat().replace("+00:00", "Z")}
            if recommended is not None:
                body["recommended_action"] = recommended
            headers = {}
            if key:
                body |= {"event_id": key, "seq": seq}
                headers[IDEMPOTENCY_HEADER] = key
            assert self._client is not None
            async with self._client.post(url, json=body, headers=headers) as response:
                if response.status >= 400:
                    raise RuntimeError(f"{url} answered {response.status}")
        elif self.config.type == "exec":
            template = getattr(self.config.exec, action)
            if template is None:
                return
            env = {"HERD_EVENT_ID": key, "HERD_EVENT_SEQ": str(seq)} if key else {}
            if recommended is not None:
                env["HERD_RECOMMENDED_ACTION"] = recommended
            await self._run(template, node_id, reason, env or None)
        elif self._slurm is not None:
            await self._slurm.update(action, self._slurm_name(node_id), reason)

    def _slurm_name(self, node_id: str) -> str:
        assert self._slurm is not None
        view = self.projector.nodes.get(node_id)
        return self._slurm.name(node_id, view.info.labels if view is not None else {})

    async def _run(self, template: str, node_id: str, reason: str,
                   env: dict[str, str] | None = None) -> str:
        command = template.format(node_id=shlex.quote(node_id), reason=shlex.quote(reason))
        proc = await asyncio.create_subprocess_shell(
            command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})
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
            url = self.config.webhook.drain_status_url
            assert self._client is not None and url is not None
            async with self._client.get(url, params={"node_id": node_id}) as response:
                response.raise_for_status()
                # any content type: a receiver may answer JSON as text/plain
                body = await response.json(content_type=None)
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
