"""The request/reply API: a NATS micro service on ``herd.api.v1.>`` in a queue group,
so several control-plane replicas share it.

Every route answers on ``herd.api.v1.<route>`` and ``herd.api.v1.<route>.<user>`` (the
user its credentials name: ``caller.caller``). Requests and replies are the Structs of
``messages``; the reply is ``Ok`` or ``Failed`` with a code. Commands decide on the
current view and go through the one ``DecideRunner`` (append with the expected version,
decide again after a conflict); the reply is sent after the view has applied the new
events (read-your-writes).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request

import herdbook
from herdbook.api.admin import AdminRoutes
from herdbook.api.allocs import AllocRoutes
from herdbook.api.breaker_routes import BreakerRoutes
from herdbook.api.caller import CALLER
from herdbook.api.explain import ExplainRoutes
from herdbook.api.gpus import GpuRoutes, NoTelemetry, TelemetrySource
from herdbook.api.history_routes import HistoryRoutes
from herdbook.api.jobs import JobRoutes
from herdbook.api.lookup import ApiError
from herdbook.api.messages import ErrorCode, Failed, Ok
from herdbook.api.nodes import NodeRoutes
from herdbook.api.pools import PoolRoutes
from herdbook.api.repair_routes import RepairRoutes
from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.events.job_events import JobSpecError
from herdbook.events.store import EventStore, StorageFullError
from herdbook.events.subjects import API_PREFIX, InvalidIdError, validate_id
from herdbook.health.fault_history import FaultHistory
from herdbook.history.repairs_live import LiveRepairs
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker import Breaker
from herdbook.reactors.decide_runner import DecideRunner, KeptChanging
from herdbook.reactors.refused import CommandRefused
from herdbook.reactors.sweeper import Sweeper
from herdbook.reactors.validation_deciders import validation_waiting

log = logging.getLogger(__name__)

QUEUE_GROUP = "herd-api"
_encoder = msgspec.json.Encoder()

Handler = Callable[[bytes], Awaitable[Any]]


class ApiMetrics(Protocol):
    """Where a request's duration goes (``control.metrics.ApiMetrics``)."""

    def observe_request(self, route: str, seconds: float) -> None: ...


class Api:
    def __init__(self, nc: NATS, store: EventStore, projector: ProjectorRunner,
                 sweeper: Sweeper, rebuild: Callable[[], Awaitable[dict[str, Any]]],
                 instance: str, config: Config | None = None,
                 metrics: ApiMetrics | None = None, *, clock: Clock, runner: DecideRunner,
                 breaker: Breaker | None = None,
                 telemetry: TelemetrySource | None = None, faults: FaultHistory | None = None,
                 repairs: LiveRepairs | None = None) -> None:
        """``telemetry``: the latest GPU readings (``reactors/telemetry_intake``);
        ``faults``: the classifier's fault history, for ``gpu.describe``; ``repairs``:
        the live repair fold, for ``fleet.repairs`` and ``status``."""
        self.config = config or Config()
        self.is_leader: Callable[[], bool] = lambda: True
        """Whether this replica holds the leader lease (set by the control plane)."""
        self.nc = nc
        self.store = store
        self.projector = projector
        self.metrics = metrics
        self.clock = clock
        self.runner = runner
        self.service: Any = None
        self.gpus = GpuRoutes(lambda: projector.nodes, telemetry or NoTelemetry(), faults, clock)
        nodes = NodeRoutes(nc, store, projector, sweeper, self.runner, self.config)
        nodes.gpu_rows = self.gpus.node_rows
        repair_routes = RepairRoutes(repairs, clock) if repairs is not None else None
        self.routes: dict[str, Handler] = {
            **nodes.routes(),
            **self.gpus.routes(),
            **JobRoutes(projector, self.runner).routes(),
            **AllocRoutes(projector, self.runner).routes(),
            **ExplainRoutes(nc, projector, self.config).routes(),
            **PoolRoutes(projector, self.runner, self.config).routes(),
            **AdminRoutes(nc, projector, sweeper, rebuild, instance,
                          lambda: self.is_leader(), clock, breaker,
                          repairs=repair_routes.status if repair_routes else None,
                          waiting=validation_waiting(self.config)).routes(),
            **HistoryRoutes(nc, lambda: projector.nodes, clock=clock).routes(),
            **(BreakerRoutes(breaker).routes() if breaker is not None else {}),
            **(repair_routes.routes() if repair_routes is not None else {}),
        }

    async def start(self) -> None:
        self.service = await add_service(
            self.nc, name="herd-api", version=herdbook.__version__,
            description="herdbook control plane API", queue_group=QUEUE_GROUP)
        for route, handler in self.routes.items():
            wrapped = self._wrap(handler, route)
            name = route.replace(".", "-")
            await self.service.add_endpoint(name=name, subject=f"{API_PREFIX}.{route}",
                                            handler=wrapped)
            await self.service.add_endpoint(name=f"{name}-as", subject=f"{API_PREFIX}.{route}.*",
                                            handler=wrapped)

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()

    def _wrap(self, handler: Handler, route: str = "") -> Callable[[Request], Awaitable[None]]:
        depth = API_PREFIX.count(".") + route.count(".") + 2

        async def endpoint(request: Request) -> None:
            started = self.clock.monotonic()
            tokens = request.subject.split(".")
            token = CALLER.set(None)
            try:
                if len(tokens) == depth + 1:
                    CALLER.set(validate_id(tokens[-1], "user"))
                body: Ok | Failed = Ok(result=await handler(request.data))
            except Exception as err:  # noqa: BLE001 - every error is one reply
                body = self.failed(request.subject, err)
            finally:
                CALLER.reset(token)
            await request.respond(_encoder.encode(body))
            if self.metrics is not None:
                self.metrics.observe_request(route, self.clock.monotonic() - started)
        return endpoint

    def failed(self, subject: str, err: Exception) -> Failed:
        return failure(err, subject, self.store.storage_full)


def failure(err: Exception, subject: str,
            storage_full: Callable[[], str | None] | None = None) -> Failed:
    """The reply to a request that raised ``err`` (``storage_full``: why NATS cannot
    store now, if it cannot)."""
    match err:
        case ApiError():
            return Failed(code=ErrorCode(err.code), error=str(err))
        case CommandRefused():
            return Failed(code=ErrorCode.REFUSED, error=str(err))
        case KeptChanging():
            # Another writer moved the aggregate under every attempt: try again later.
            return Failed(code=ErrorCode.UNAVAILABLE, error=str(err))
        case StorageFullError():
            # Said once in the log by whoever noticed it, not once per request.
            return Failed(code=ErrorCode.STORAGE_FULL, error=str(err))
        case nats.errors.TimeoutError() | nats.errors.NoRespondersError():
            why = storage_full() if storage_full is not None else None
            if why is not None:
                return Failed(code=ErrorCode.STORAGE_FULL, error=why)
            log.warning("API request on %s: NATS did not answer (%s)", subject,
                        type(err).__name__)
            return Failed(code=ErrorCode.UNAVAILABLE,
                          error="NATS did not answer in time; try again")
        case (InvalidIdError() | msgspec.ValidationError() | msgspec.DecodeError()
              | ValueError() | JobSpecError()):
            return Failed(code=ErrorCode.BAD_REQUEST, error=str(err))
    log.error("API request on %s failed", subject, exc_info=err)
    return Failed(code=ErrorCode.INTERNAL, error=f"internal error: {err!r}")
