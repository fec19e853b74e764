"""The control plane's two HTTP endpoints, built by ``bootstrap``: ``/metrics`` (with the
GPU pages) and the HTTP API, each with the start that turns a port in use into a one-line
``StartupError``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.client import Client as NATS

from herdbook.api.service import Api
from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.control.errors import StartupError
from herdbook.control.gpu_metrics import GpuExposition, HealthCollector, parse_shard
from herdbook.control.metrics import ControlPlaneCollector, Metrics, MetricsServer, Page, scrape
from herdbook.natsd.http_tokens import HttpTokens
from herdbook.natsd.token_bucket import TokenBucket
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.sweeper import Sweeper
from herdbook.reactors.telemetry_intake import TelemetryIntake
from herdbook.web.auth import check_bind
from herdbook.web.http_api import WebServer


def metrics_endpoint(cfg: Config, metrics: Metrics, projector: ProjectorRunner,
                     sweeper: Sweeper, nc: NATS,
                     telemetry: TelemetryIntake | None = None) -> MetricsServer:
    """``GET /metrics`` on ``metrics.host:port``, collected from the view and the
    sweeper at scrape time; with ``telemetry``, the node and GPU health series there
    and every GPU's readings on ``/metrics/gpus`` (``control/gpu_metrics.py``)."""
    collector = ControlPlaneCollector(metrics, projector, sweeper)
    metrics.registry.register(collector)
    js = nc.jetstream()
    pages: dict[str, Page] = {}
    health: HealthCollector | None = None
    if telemetry is not None:
        # after the registry's families, in chunks of nodes (a page of 10k nodes' series
        # rendered at once stalled heartbeat ingest 0.7-2.4 s)
        health = HealthCollector(lambda: projector.nodes, telemetry)
        gpus = GpuExposition(lambda: projector.nodes, telemetry)

        async def gpu_page(query: dict[str, str]) -> list[bytes]:
            return await gpus.chunks(*parse_shard(query))
        pages["/metrics/gpus"] = gpu_page
    return MetricsServer(cfg.metrics.host, cfg.metrics.port,
                         lambda: scrape(metrics.registry, collector, js,
                                        health.chunks if health is not None else None),
                         pages)


def serving(server: MetricsServer) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        try:
            await server.start()
        except OSError as err:
            raise StartupError(f"cannot serve metrics on {server.host}:{server.port}: "
                               f"{err.strerror} (pass another --metrics-port)") from err
    return start


def http_endpoint(cfg: Config, api: Api, sweeper: Sweeper, nc: NATS, clock: Clock,
                  best_effort: bool = False) -> WebServer | None:
    """The HTTP API on ``http.host:port`` (off without a port or with 0); with
    ``nats.auth`` it takes the bearer tokens of ``herd creds operator --http``."""
    if not cfg.http.port:
        return None
    tokens = (TokenBucket(nc, cfg.nats.replicas, HttpTokens(Path(cfg.data_dir) / "nats"))
              if cfg.nats.auth else None)
    if check_bind(cfg.http.host, tokens is not None) is not None:
        raise StartupError(str(check_bind(cfg.http.host, tokens is not None)))
    return WebServer(api, sweeper, nc, host=cfg.http.host, port=cfg.http.port, tokens=tokens,
                     clock=clock, best_effort=best_effort)


def serving_http(server: WebServer) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        try:
            await server.start()
        except OSError as err:
            raise StartupError(f"cannot serve HTTP on {server.host}:{server.port}: "
                               f"{err.strerror} (pass another --http-port, or 0: off)") from err
        if server.serving and isinstance(server.tokens, TokenBucket):
            try:   # for `herd creds operator --http`'s example: the port in use
                server.tokens.record_url(server.url)
            except OSError:
                pass   # the example then names the default port
    return start
