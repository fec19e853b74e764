"""Composition root of the control plane: embedded nats-server, stream setup, the
projector, the reactors, the API, and this control plane's own requester node."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import platform
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError

import herdbook
from herdbook.agent.connection import connection_callbacks, quiet_errors, server_list
from herdbook.agent.protocol import NodeProtocol, send_heartbeat
from herdbook.agent.state import SeqAllocator
from herdbook.config import Config, heartbeats_max_age
from herdbook.control.agent_sync import AgentSync
from herdbook.control.api import Api
from herdbook.control.instances import InstanceManager
from herdbook.control.leader import LeaderLease
from herdbook.control.metrics import ControlPlaneCollector, Metrics, MetricsServer, scrape
from herdbook.control.providers import FakeProvider, LocalProvider
from herdbook.control.streams_guard import StreamsGuard
from herdbook.credentials import CredentialsError, CredsFile, NatsAuth, redact, write_creds
from herdbook.events.node import NodeInfo
from herdbook.events.states import NodeType
from herdbook.events.store import ConflictError, EventStore, stream_last_seq
from herdbook.events.streams import all_streams
from herdbook.events.subjects import EVENTS_STREAM, validate_id
from herdbook.natsd.server import EmbeddedNats, NatsServerError
from herdbook.natsd.storage_watch import StorageWatch
from herdbook.natsd.users import UserRegistry
from herdbook.projector.integrity import ViewError
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.allocations import AllocationReactor
from herdbook.reactors.approver import AutoApprover
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.health_policy import Policy, PolicyError
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.scheduler import Scheduler
from herdbook.reactors.sensitive import SensitiveReactor
from herdbook.reactors.sweeper import Sweeper
from herdbook.signals import stop_on_signals, stopped_by_signal

log = logging.getLogger(__name__)

MIN_SERVER_VERSION = (2, 11)
REQUESTER_HEARTBEAT_INTERVAL = 5.0


class StartupError(RuntimeError):
    """Startup refused, with a message for the operator."""


class ControlPlaneFailed(RuntimeError):
    """A running control plane could not go on (its embedded nats-server kept dying);
    one line for the operator, and a non-zero exit so that a supervisor restarts it."""


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


async def ensure_streams(nc: NATS, replicas: int, health_max_age: float,
                         heartbeats_max_age: float = 86400.0) -> list[StreamConfig]:
    """Create or update the three streams; safe to run on every start. Returns their
    configurations (what the streams guard recreates a deleted one with)."""
    js = nc.jetstream()
    configs = all_streams(replicas, health_max_age, heartbeats_max_age)
    for config in configs:
        try:
            await js.stream_info(str(config.name))
        except NotFoundError:
            await js.add_stream(config)
            continue
        try:
            await js.update_stream(config)
        except BadRequestError as err:
            log.warning("stream %s kept its old config: %s", config.name, err.description)
    return configs


def default_requester_id() -> str:
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())
    return f"requester-{host}"[:128]


COMMAND_ATTEMPTS = 5
DRAIN_TIMEOUT = 1.0
"""Seconds a stop waits for NATS to confirm the drain (DESIGN §9: stopped within 2 s)."""


class ControlPlane:
    def __init__(self, config: Config, *, demo: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.demo = demo
        self.clock = clock
        self.data_dir = Path(config.data_dir)
        self.node_id = validate_id(config.node_id or default_requester_id())
        self.requester = NodeProtocol(self.node_id, actor=f"control:{self.node_id}",
                                      seqs=SeqAllocator(self.data_dir))
        """This control plane's own node (``NodeType.REQUESTER``), on the agent protocol."""
        self.embedded: EmbeddedNats | None = None
        self.nc: NATS | None = None
        self.projector: ProjectorRunner | None = None
        self.sweeper: Sweeper | None = None
        self.approver: AutoApprover | None = None
        self.classifier: HealthClassifier | None = None
        self.instances: InstanceManager | None = None
        self.fake_provider: FakeProvider | None = None
        self.notifier: Notifier | None = None
        self.api: Api | None = None
        self.agent_sync: AgentSync | None = None
        self.scheduler: Scheduler | None = None
        self.allocations: AllocationReactor | None = None
        self.metrics: Metrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.sensitive: SensitiveReactor | None = None
        self.lease: LeaderLease | None = None
        self.streams_guard: StreamsGuard | None = None
        self.storage: StorageWatch | None = None
        """With the embedded server: its disk, watched (``natsd/storage_watch.py``)."""
        self._store: Any = None
        self._lock_file: Any = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._demo_agents: list[Any] = []
        self.url = ""
        self.users: UserRegistry | None = None
        """With ``nats.auth``: the embedded server's users (`herd creds`)."""
        self.failure: str | None = None
        """Why this control plane cannot go on (one line), once it cannot."""
        self.on_failure: Callable[[], None] = lambda: None
        """Called once ``failure`` is set: ``run`` stops, then raises ControlPlaneFailed."""

    def _lock_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.data_dir / "herd.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise StartupError(f"another herd up is using {self.data_dir} "
                               "(use another --data-dir)") from err
        self._lock_file.write(f"{os.getpid()}\n")
        self._lock_file.flush()

    async def start(self) -> dict[str, Any]:
        self._lock_data_dir()
        cfg = self.config
        tls = cfg.nats.tls
        auth = NatsAuth(creds=cfg.nats.creds, tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key)
        if cfg.nats.url:
            if cfg.nats.auth:
                raise StartupError("nats.auth (--auth) is for the embedded nats-server; with "
                                   "--nats-url pass that server's credentials (nats.creds, or "
                                   "user:password in the URL)")
            self.url = cfg.nats.url
        else:
            users_conf = None
            if cfg.nats.auth:
                self.users = UserRegistry(self.data_dir / "nats")
                control = self.users.ensure_control()
                auth, users_conf = (NatsAuth(user=control.user, password=control.password),
                                    self.users.conf_path)
            self.embedded = EmbeddedNats(self.data_dir / "nats", cfg.nats.port,
                                         cfg.nats.host, cfg.nats.sync_interval,
                                         users_conf=users_conf)
            try:
                # Stops a server an earlier herd up of this data dir left running (this
                # one holds the data dir's lock, so that one is gone) and refuses a port
                # held by anything else.
                await self.embedded.start_async()
            except NatsServerError as err:
                raise StartupError(str(err)) from err
            self.url = self.embedded.url
            self._tasks.append(asyncio.create_task(self._supervise_nats(self.embedded)))
            self.storage = StorageWatch(self.embedded.store_dir, self._restart_nats)
            await self.storage.start()
        try:
            _, options = auth.resolve(self.url)
        except CredentialsError as err:
            raise StartupError(str(err)) from err
        try:
            self.nc = await nats.connect(server_list(self.url), name=f"herd-control:{self.node_id}",
                                         max_reconnect_attempts=-1, reconnect_time_wait=1,
                                         connect_timeout=5, allow_reconnect=True,
                                         error_cb=quiet_errors, **connection_callbacks(),
                                         **options)
        except Exception as err:
            raise StartupError(f"cannot connect to NATS at {redact(self.url)}: {err}") from err
        check_server_version(str(self.nc._server_info.get("version", "")))
        streams = await ensure_streams(self.nc, cfg.nats.replicas, float(cfg.health.max_age),
                                       heartbeats_max_age(cfg))
        store = EventStore(self.nc.jetstream(),
                           storage_full=self.storage.full if self.storage is not None else None)
        self.projector = ProjectorRunner(
            self.nc, str(self.data_dir / "view.db"), batch_size=cfg.projector.batch_size,
            batch_interval=float(cfg.projector.batch_interval))
        try:
            await self.projector.start()
        except ViewError as err:
            raise StartupError(str(err)) from err
        self.streams_guard = StreamsGuard(self.nc, streams, floor=self._folded)
        await self.streams_guard.start()
        await self._catch_up()
        self.agent_sync = AgentSync(self.nc)
        await self.agent_sync.start()
        if cfg.metrics.port:
            # Counted from here on: what the catch-up folded happened before this start.
            self.metrics = Metrics()
            self.projector.nodes.subscribe(self.metrics.on_node_event)
        # This control plane's own node first: registered and heartbeating before the
        # sweeper reads the stored heartbeats, so a restart does not find itself silent.
        await self._register_requester(store)
        self._tasks.append(asyncio.create_task(self._requester_heartbeats()))
        await self.nc.flush()
        self.sweeper = Sweeper(self.nc, store, self.projector, cfg, clock=self.clock)
        await self.sweeper.start()
        self.approver = AutoApprover(store, self.projector, cfg.approval.auto_approve)
        self.approver.start()
        try:
            policy = Policy.load(cfg.health.policy)
        except PolicyError as err:
            raise StartupError(str(err)) from err
        self.classifier = HealthClassifier(self.nc, store, self.projector, policy,
                                           cfg.health.unhealthy_threshold,
                                           self.data_dir / "health.position",
                                           {name: pool.health.unhealthy_threshold
                                            for name, pool in cfg.pools.items()})
        await self.classifier.start()
        self.fake_provider = FakeProvider(self.nc, self.data_dir)
        self._store = store
        # What must not run twice runs on the leader only (see control/leader.py).
        self.lease = LeaderLease(self.nc, self.node_id, ttl=float(cfg.leader_ttl),
                                 replicas=cfg.nats.replicas, on_elected=self._lead,
                                 on_lost=self._follow)
        await self.lease.start()
        self.api = Api(self.nc, store, self.projector, self.sweeper, self.rebuild_view,
                       self.node_id, cfg, metrics=self.metrics)
        lease = self.lease
        self.api.is_leader = lambda: lease is not None and lease.leader
        await self.api.start()
        # The API's subscriptions reach the server before start() returns, so a request
        # sent right after finds a responder.
        await self.nc.flush()
        if self.metrics is not None:
            await self._start_metrics(self.metrics)
        if self.demo:
            await self._start_demo(self.demo)
        return {"nats_url": redact(self.url), "embedded": self.embedded is not None,
                "auth": self.users is not None,
                "node_id": self.node_id, "data_dir": str(self.data_dir),
                "nodes": len(self.projector.nodes),
                "metrics_url": self.metrics_server.url if self.metrics_server else None}

    async def _supervise_nats(self, embedded: EmbeddedNats) -> None:
        """Restart the embedded server when it dies; give up (``failure``) after a few."""
        self.failure = await embedded.supervise()
        self.on_failure()

    async def _restart_nats(self, timeout: float = 30.0, handover: float = 5.0) -> None:
        """Restart the embedded nats-server (``StorageWatch``: its streams keep a write
        error until then): stopped here, started again by ``_supervise_nats`` on the same
        port and store, or here if nothing did within ``handover`` seconds. Then the view
        must not be ahead of what the server kept."""
        embedded = self.embedded
        assert embedded is not None and self.nc is not None
        old = embedded.proc
        await embedded.restart()
        started = time.monotonic()
        while (embedded.proc is None or embedded.proc is old or embedded.proc.poll() is not None
               or not self.nc.is_connected):
            waited = time.monotonic() - started
            if waited > timeout:
                raise RuntimeError(f"nats-server did not come back within {timeout:g}s")
            if waited > handover and embedded.proc is old:
                await embedded.start_async()
            await asyncio.sleep(0.1)
        await self._rebuild_if_ahead()

    async def _rebuild_if_ahead(self) -> None:
        """A write acknowledged just before the disk filled may not have reached it: a view
        that folded it would take the next event given that sequence for one it has."""
        assert self.nc is not None and self.projector is not None
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if self.projector.folded_seq > last:
            log.error("the view is at sequence %d but %s ends at %d after the restart: "
                      "rebuilding it from sequence 1", self.projector.folded_seq,
                      EVENTS_STREAM, last)
            await self.rebuild_view()

    def _folded(self, stream: str) -> int:
        """How far the projector read ``stream``: a recreated one starts after it."""
        if stream != EVENTS_STREAM or self.projector is None:
            return 0
        return self.projector.folded_seq

    async def _start_metrics(self, metrics: Metrics) -> None:
        assert self.nc is not None and self.projector is not None and self.sweeper is not None
        projector, sweeper, js = self.projector, self.sweeper, self.nc.jetstream()
        host, port = self.config.metrics.host, self.config.metrics.port
        collector = ControlPlaneCollector(metrics, projector, sweeper)
        metrics.registry.register(collector)
        self.metrics_server = MetricsServer(host, port,
                                            lambda: scrape(metrics.registry, collector, js))
        try:
            await self.metrics_server.start()
        except OSError as err:
            self.metrics_server = None
            raise StartupError(f"cannot serve metrics on {host}:{port}: {err.strerror} "
                               "(pass another --metrics-port)") from err

    async def _lead(self) -> None:
        """Elected: start the reactors that run on one replica only."""
        assert self.nc is not None and self.projector is not None and self.sweeper is not None
        assert self.fake_provider is not None
        cfg, store = self.config, self._store
        await self._catch_up()
        self.instances = InstanceManager(
            cfg, store, self.projector, self.sweeper,
            {"local": LocalProvider(self.data_dir, self.url, self._agent_args), "fake": self.fake_provider})
        self.instances.start()
        self.notifier = Notifier(cfg.notifier, store, self.projector)
        await self.notifier.start()
        self.allocations = AllocationReactor(store, self.projector, cfg)
        self.allocations.start()
        self.scheduler = Scheduler(self.nc, store, self.projector, cfg)
        await self.scheduler.start()
        sweeper = self.sweeper
        self.sensitive = SensitiveReactor(
            store, self.projector, cfg,
            lambda: {n: b.fingerprint for n, b in sweeper.beats.items() if b.fingerprint})
        self.sensitive.start()

    async def _follow(self) -> None:
        """Not (or no longer) the leader: stop the one-replica reactors."""
        for name in ("sensitive", "scheduler", "allocations", "notifier", "instances"):
            part = getattr(self, name)
            setattr(self, name, None)
            if part is not None:
                try:
                    await part.stop()
                except Exception:
                    log.exception("stopping %s failed", type(part).__name__)

    def _agent_args(self, node_id: str, state_dir: Path) -> list[str]:
        """How an agent the local provider starts connects: its own credentials, issued
        here, on an auth-enabled embedded server; the control plane's TLS options."""
        args: list[str] = []
        if self.users is not None:
            user = self.users.add_agent(node_id)
            self.users.reload_server()
            path = state_dir / "agent.creds"
            write_creds(path, CredsFile(user=user.user, password=user.password, url=self.url,
                                        kind=user.kind, node_id=node_id))
            args += ["--creds", str(path)]
        tls = self.config.nats.tls
        for flag, value in (("--tls-ca", tls.ca), ("--tls-cert", tls.cert),
                            ("--tls-key", tls.key)):
            if value and self.embedded is None:
                args += [flag, value]
        return args

    async def _catch_up(self, timeout: float = 60.0) -> None:
        """Before reactors decide, let the view reach the stream's end as of now."""
        assert self.nc is not None and self.projector is not None
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if last:
            await self.projector.wait_applied(last, timeout=timeout)

    async def _register_requester(self, store: EventStore) -> None:
        """Register this control plane's own node with a new boot, announced before its
        heartbeats (a heartbeat of an unannounced boot does not count). A writer that got
        in between makes it catch up and register again."""
        assert self.projector is not None
        info = NodeInfo(hostname=socket.gethostname(), arch=platform.machine(),
                        os=platform.system().lower(), cpus=os.cpu_count() or 0,
                        agent_version=herdbook.__version__)
        node = self.requester
        node.new_boot()
        for _ in range(COMMAND_ATTEMPTS):
            view = self.projector.nodes.get(self.node_id)
            event = node.registered(info, NodeType.REQUESTER)
            try:
                seq = await store.append(event, expected_version=view.version if view else 0)
                # This process is its own boot check: it is up and serving.
                seq = await store.append(node.boot_checked({"control_plane": "ok"}),
                                         expected_version=seq)
                await self.projector.wait_applied(seq)
                return
            except ConflictError:
                await self.projector.wait_applied(
                    await store.last_sequence("node", self.node_id))
        raise StartupError(f"requester node {self.node_id} kept changing while registering")

    async def _requester_heartbeats(self) -> None:
        assert self.nc is not None
        # Well inside the shortest timeout, so a short test config does not mark us DEGRADED.
        interval = min(REQUESTER_HEARTBEAT_INTERVAL,
                       float(self.config.lifecycle.heartbeat_timeout) / 3)
        while True:
            try:
                await send_heartbeat(self.nc, self.requester.heartbeat())
            except Exception as err:  # noqa: BLE001 - disconnected: heartbeats may be lost
                log.debug("requester heartbeat not sent: %s", err)
            await asyncio.sleep(interval)

    async def _start_demo(self, count: int) -> None:
        from herdbook.agent.main import Agent, AgentOptions
        assert self.nc is not None
        for i in range(count):
            options = AgentOptions(
                server=self.url, node_id=f"demo-{i:03d}",
                state_dir=str(self.data_dir / "demo" / f"demo-{i:03d}"),
                labels={"demo": "true", "rack": f"r{i % 4}"}, fake_gpus=8,
                heartbeat_interval=5.0)
            agent = Agent(options, nc=self.nc)
            self._demo_agents.append(agent)
            self._tasks.append(asyncio.create_task(agent.run()))

    async def rebuild_view(self) -> dict[str, Any]:
        """Replay HERD_EVENTS from sequence 1 into a fresh database, then swap it in."""
        assert self.nc is not None and self.projector is not None
        started = time.monotonic()
        db = self.data_dir / "view.db"
        tmp = self.data_dir / "view.rebuild.db"
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
        fresh = ProjectorRunner(self.nc, str(tmp), batch_size=self.config.projector.batch_size,
                                batch_interval=float(self.config.projector.batch_interval))
        await fresh.start()
        last = await stream_last_seq(self.nc.jetstream(), EVENTS_STREAM)
        if last:
            await fresh.wait_applied(last, timeout=600.0)
        await fresh.stop()
        old = self.projector
        await old.stop()
        os.replace(tmp, db)
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        await old.start()
        seconds = time.monotonic() - started
        return {"events": last, "nodes": len(old.nodes), "seconds": round(seconds, 3),
                "events_per_second": round(last / seconds) if seconds else None}

    async def stop(self) -> None:
        if self.storage is not None:
            await self.storage.stop()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        for agent in self._demo_agents:
            await agent.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        if self.fake_provider is not None:
            await self.fake_provider.stop_all()
        if self.lease is not None:
            await self.lease.stop()   # stops the leader's reactors through _follow
        for part in (self.streams_guard, self.api, self.agent_sync, self.sensitive, self.scheduler,
                     self.allocations, self.notifier, self.instances, self.classifier,
                     self.approver, self.sweeper, self.projector):
            if part is not None:
                try:
                    await part.stop()
                except Exception:
                    log.exception("stopping %s failed", type(part).__name__)
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.drain(), DRAIN_TIMEOUT)
            except Exception:  # noqa: BLE001 - a server that does not answer is not waited for
                try:
                    await self.nc.close()
                except Exception:  # noqa: BLE001 - the server is gone: nothing to close
                    pass
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
        if self._lock_file is not None:
            self._lock_file.close()


async def run(config: Config, *, demo: int = 0,
              on_ready: Callable[[dict[str, Any]], None] | None = None,
              stop: asyncio.Event | None = None) -> None:
    """Run the control plane until ``stop`` is set (SIGINT/SIGTERM by default); stopped
    within 2 s of the signal whatever NATS does (``herdbook.signals``)."""
    plane = ControlPlane(config, demo=demo)
    stop = stop or asyncio.Event()
    plane.on_failure = stop.set
    stop_on_signals(stop)
    try:
        info = await plane.start()
        if on_ready is not None:
            on_ready(info)
        await stop.wait()
    except asyncio.CancelledError as err:
        if not stopped_by_signal(stop, err):
            raise
    finally:
        try:
            await plane.stop()
        finally:
            if plane.failure is not None:
                # The cause of whatever else went wrong meanwhile: one line, no traceback.
                raise ControlPlaneFailed(plane.failure)  # noqa: B012
