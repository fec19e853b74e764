"""The control plane's NATS, as parts: the embedded nats-server (with ``nats.auth``, its
users) and its supervisor, and the client connection, which checks the server's version
and creates or updates the streams."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable

from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

from herdbook.clock import Clock
from herdbook.control.errors import StartupError
from herdbook.credentials import CredentialsError, NatsAuth, redact
from herdbook.events import nats_private
from herdbook.events.narrow_parser import sid_routes
from herdbook.events.streams import all_streams
from herdbook.nats_connection import connection_callbacks, quiet_errors, server_list
from herdbook.natsd.embedded import EmbeddedNats, NatsServerError
from herdbook.natsd.users import UserRegistry

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = (2, 11)
DRAIN_TIMEOUT = 1.0
"""Seconds a stop waits for NATS to confirm the drain (DESIGN §9: stopped within 2 s)."""


def check_server_version(version: str) -> None:
    """Per-aggregate concurrency needs nats-server >= 2.11: an older server ignores the
    header and silently breaks the guarantee, so it is refused."""
    match = re.search(r"(\d+)\.(\d+)", version)
    if match is None:
        raise StartupError(f"cannot read nats-server version {version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    if (major, minor) < MIN_SERVER_VERSION:
        raise StartupError(
            f"nats-server {version} is too old: herdbook needs 2.11 or newer "
            "(per-aggregate optimistic concurrency, Nats-Expected-Last-Subject-Sequence-Subject)")


async def create_or_update(nc: NATS, configs: list[StreamConfig],
                           first_seq: Callable[[str], int] = lambda stream: 0) -> None:
    """Safe on every start: a stream is created if missing, its config updated if not.
    ``first_seq(stream)``: where a missing stream starts, when it was lost (deleted, or
    the NATS store wiped, while no herd up ran: this data dir's view has a fleet) rather
    than never made (0): after what its readers read, as the streams guard does while
    running, so the view is kept (``projector/rebase.py``) and no reader takes a new
    message for one it had."""
    js = nc.jetstream()
    for config in configs:
        try:
            info = await js.stream_info(str(config.name))
        except NotFoundError:
            start = first_seq(str(config.name))
            await js.add_stream(dataclasses.replace(config, first_seq=start)
                                if start > 1 else config)
            if start > 1:
                log.error("stream %s was missing (deleted, or the NATS store wiped, while "
                          "no herd up ran): created it again from sequence %d; what it "
                          "held is lost, the view keeps what it folded", config.name, start)
            continue
        if info.config.first_seq:
            # A stream the streams guard created again after a loss starts after what was
            # read; an update without it would clear it, and the next start would take
            # the kept view for one of another history (control/streams_guard.py).
            config = dataclasses.replace(config, first_seq=info.config.first_seq)
        try:
            await js.update_stream(config)
        except BadRequestError as err:
            log.warning("stream %s kept its old config: %s", config.name, err.description)


async def ensure_streams(nc: NATS, replicas: int, health_max_age: float,
                         heartbeats_max_age: float = 86400.0) -> list[StreamConfig]:
    """Create or update the three streams; returns their configurations."""
    configs = all_streams(replicas, health_max_age, heartbeats_max_age)
    await create_or_update(nc, configs)
    return configs


class EmbeddedServer:
    """``herd up`` without ``--nats-url``: its own nats-server, with ``users`` when
    ``nats.auth`` is on (their file must exist before the server reads it)."""

    name = "nats-server"
    leader_only = False

    def __init__(self, server: EmbeddedNats, users: UserRegistry | None) -> None:
        self.server = server
        self.users = users

    async def start(self) -> None:
        if self.users is not None:
            self.users.ensure_control()
        try:
            # Stops a server an earlier herd up of this data dir left running (this one
            # holds the data dir's lock, so that one is gone) and refuses a port held by
            # anything else.
            await self.server.start_async()
        except NatsServerError as err:
            raise StartupError(str(err)) from err

    async def stop(self) -> None:
        await asyncio.to_thread(self.server.stop)

    async def restart(self, nc: NATS, *, timeout: float = 30.0, handover: float = 5.0) -> None:
        """Restart the server (``StorageWatch``: its streams keep a write error until
        then): stopped here, started again by the supervisor on the same port and store,
        or here if nothing did within ``handover`` seconds; returns once ``nc`` is back."""
        server = self.server
        old = server.proc
        await server.restart()
        started = asyncio.get_running_loop().time()
        while (server.proc is None or server.proc is old or server.proc.poll() is not None
               or not nc.is_connected):
            waited = asyncio.get_running_loop().time() - started
            if waited > timeout:
                raise RuntimeError(f"nats-server did not come back within {timeout:g}s")
            if waited > handover and server.proc is old:
                await server.start_async()
            await asyncio.sleep(0.1)


class ServerSupervisor:
    """Restarts the embedded server when it dies; after too many deaths records why in
    ``failure`` and calls ``on_failure`` (``herd up`` then stops and exits non-zero)."""

    name = "nats-server supervisor"
    leader_only = False

    def __init__(self, server: EmbeddedNats, clock: Clock,
                 on_failure: Callable[[], None]) -> None:
        self.server = server
        self.clock = clock
        self.on_failure = on_failure
        self.failure: str | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=self.name)

    async def _supervise(self) -> None:
        self.failure = await self.server.supervise(clock=self.clock.monotonic)
        self.on_failure()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


class NatsConnection:
    """The control plane's client: connected on start (reconnecting forever after that),
    the server's version checked and the streams made ready; drained on stop, closed if
    the server does not answer within ``DRAIN_TIMEOUT``."""

    name = "nats connection"
    leader_only = False

    def __init__(self, nc: NATS, url: str, auth: Callable[[], NatsAuth], client_name: str,
                 streams: list[StreamConfig],
                 first_seq: Callable[[str], int] = lambda stream: 0) -> None:
        self.nc = nc
        self.url = url
        self.auth = auth
        self.client_name = client_name
        self.streams = streams
        self.first_seq = first_seq

    async def start(self) -> None:
        try:
            _, options = self.auth().resolve(self.url)
        except CredentialsError as err:
            raise StartupError(str(err)) from err
        try:
            await self.nc.connect(server_list(self.url), name=self.client_name,
                                  max_reconnect_attempts=-1, reconnect_time_wait=1,
                                  connect_timeout=5, allow_reconnect=True,
                                  error_cb=quiet_errors, **connection_callbacks(), **options)
        except Exception as err:
            raise StartupError(f"cannot connect to NATS at {redact(self.url)}: {err}") from err
        check_server_version(nats_private.server_version(self.nc))
        await nats_private.self_check(self.nc, sid_routes)   # one WARNING, public path if not
        await create_or_update(self.nc, self.streams, self.first_seq)

    async def stop(self) -> None:
        try:
            await asyncio.wait_for(self.nc.drain(), DRAIN_TIMEOUT)
        except Exception:  # noqa: BLE001 - a server that does not answer is not waited for
            try:
                await self.nc.close()
            except Exception:  # noqa: BLE001 - the server is gone: nothing to close
                pass
