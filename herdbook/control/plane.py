"""What ``bootstrap`` returns: a control plane's parts, to start and stop, and the ones
its callers read (the view, the sweeper, the connection) by name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from herdbook.api.service import Api
from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.control.agent_sync import AgentSync
from herdbook.control.leader import LeaderLease
from herdbook.control.metrics import Metrics, MetricsServer
from herdbook.control.nats_parts import ServerSupervisor
from herdbook.control.parts import Parts
from herdbook.control.providers import Provider
from herdbook.control.streams_guard import StreamsGuard
from herdbook.control.view_rebuild import ViewRebuild
from herdbook.credentials import redact
from herdbook.events.store import EventStore
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.natsd.storage_watch import StorageWatch
from herdbook.natsd.users import UserRegistry
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.approver import AutoApprover
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.sweeper import Sweeper
from herdbook.web.http_api import WebServer


@dataclass(eq=False, kw_only=True)
class ControlPlane:
    config: Config
    clock: Clock
    node_id: str
    """This control plane's own node (``NodeType.REQUESTER``) and its lease holder name."""
    data_dir: Path
    url: str
    nc: NATS
    """Connected by ``start``."""
    store: EventStore
    providers: dict[str, Provider]
    """What creates instances, by name (``control/ports.py``): the instance manager's."""
    runner: DecideRunner
    projector: ProjectorRunner
    sweeper: Sweeper
    approver: AutoApprover
    classifier: HealthClassifier
    agent_sync: AgentSync
    streams_guard: StreamsGuard
    lease: LeaderLease
    api: Api
    rebuild_view: ViewRebuild
    parts: Parts
    """Every part, in the order they start (the leader-only ones among them)."""
    embedded: EmbeddedNats | None
    """Without ``nats.url``: the nats-server this control plane runs."""
    users: UserRegistry | None
    """With ``nats.auth``: the embedded server's users (``herd creds``)."""
    storage: StorageWatch | None
    """With the embedded server: its disk, watched."""
    supervisor: ServerSupervisor | None
    """With the embedded server: restarts it when it dies."""
    metrics: Metrics | None
    """With ``metrics.port``: what ``/metrics`` counts."""
    metrics_server: MetricsServer | None
    web: WebServer | None = None
    """With ``http.port``: the HTTP API and the console."""

    @property
    def failure(self) -> str | None:
        """Why this control plane cannot go on (one line), once it cannot."""
        return self.supervisor.failure if self.supervisor is not None else None

    async def start(self) -> dict[str, Any]:
        """Start every part in order (stopping what started if one fails); returns what
        ``herd up`` prints."""
        await self.parts.start()
        return {"nats_url": redact(self.url), "embedded": self.embedded is not None,
                "auth": self.users is not None, "node_id": self.node_id,
                "data_dir": str(self.data_dir), "nodes": len(self.projector.nodes),
                "metrics_url": self.metrics_server.url if self.metrics_server else None,
                "http_url": self.web.url if self.web is not None and self.web.serving else None,
                "http_off": self.web.skipped if self.web is not None else None}

    async def stop(self) -> None:
        """Stop every started part in reverse order."""
        await self.parts.stop()
