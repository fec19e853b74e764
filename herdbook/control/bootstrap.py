"""The composition root (cosmicpython's ``bootstrap``): the whole control plane built as a
list of parts of one shape (``control/parts.py``), in the order they start.

``herd up`` (``control/up.py``), ``herd sim`` (``sim/world.py``), the integration tests
and the benchmarks call ``bootstrap`` and then ``start``/``stop`` what it returns. One
``clock`` reaches every part that reads the time. The ports (``control/ports.py``: the
NATS client, the event store, the providers) are arguments: ``bootstrap`` passes the real
ones unless given others, ``build_plane`` requires them. Nothing here does I/O but
reading the health policy: connecting, creating streams and starting servers are the
parts' starts.

The order: the data dir's lock; the embedded nats-server, its supervisor and its disk
watch; the connection (and streams); the projector, the streams guard, a catch-up (what
decides reads a view at the stream's end); the agent sync; node-event counting for
``/metrics``; this control plane's own node (registered and heartbeating before the
sweeper reads the stored heartbeats, so a restart does not find itself silent); the
sweeper, approver and health classifier; the providers; the leader lease and, while
it is held, a catch-up and the reactors that must not run twice; the API; ``/metrics``;
demo agents.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.js.api import StreamConfig

from herdbook.agent.protocol import NodeProtocol
from herdbook.agent.state import SeqAllocator
from herdbook.api.service import Api
from herdbook.clock import Clock
from herdbook.config import Config, heartbeats_max_age
from herdbook.control.agent_sync import AgentSync
from herdbook.control.data_dir import DataDirLock
from herdbook.control.demo import DemoAgents
from herdbook.control.endpoints import http_endpoint, metrics_endpoint, serving, serving_http
from herdbook.control.errors import StartupError
from herdbook.control.instances import InstanceManager
from herdbook.control.leader import BUCKET as LEASES_BUCKET
from herdbook.control.leader import LeaderLease
from herdbook.control.metrics import BreakerCollector, Metrics, MetricsServer
from herdbook.control.nats_parts import EmbeddedServer, NatsConnection, ServerSupervisor
from herdbook.control.parts import Part, Parts, PerTerm, Service, Subscribed
from herdbook.control.plane import ControlPlane
from herdbook.control.ports import (
    REAL_PORTS,
    Ports,
    ProviderSite,
    connection_auth,
    local_agent_args,
    stop_providers,
)
from herdbook.control.repair_metrics import RepairCollector
from herdbook.control.replica import ReplicaClaim
from herdbook.control.requester import RequesterNode, default_requester_id, this_host
from herdbook.control.settings import LivenessPublisher
from herdbook.control.shards import shard_leases
from herdbook.control.snapshots import SNAPSHOTS_STREAM, SnapshotWriter, restore
from herdbook.control.snapshots import create_bucket as create_snapshots_bucket
from herdbook.control.streams_guard import StreamsGuard, unreached_seq
from herdbook.control.view_rebuild import ViewRebuild
from herdbook.credentials import NatsAuth
from herdbook.events.liveness_settings import SETTINGS_STREAM
from herdbook.events.positions import NOTIFIER_KEY, POSITIONS_STREAM, KvPosition, open_bucket
from herdbook.events.streams import all_streams
from herdbook.events.subjects import EVENTS_STREAM, validate_id
from herdbook.health.policy import Policy, PolicyError
from herdbook.history.repairs_live import LiveRepairs
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.natsd.storage_watch import StorageWatch
from herdbook.natsd.token_bucket import TokenBucket
from herdbook.natsd.users import TOKENS_STREAM, UserRegistry
from herdbook.projector import integrity
from herdbook.projector.integrity import ViewError
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.allocations import AllocationReactor
from herdbook.reactors.approver import AutoApprover
from herdbook.reactors.breaker import Breaker, BreakerFold
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.heartbeat_intake import MappingMissing
from herdbook.reactors.notifier import Notifier
from herdbook.reactors.scheduler import Scheduler
from herdbook.reactors.sensitive import SensitiveReactor
from herdbook.reactors.sweeper import Sweeper
from herdbook.reactors.telemetry_intake import TelemetryIntake
from herdbook.reactors.tracking import node_events
from herdbook.reactors.validation import ValidationReactor
from herdbook.reactors.validation_deciders import validation_waiting

log = logging.getLogger(__name__)
REQUESTER_HEARTBEAT_INTERVAL = 5.0
CATCH_UP_TIMEOUT = 60.0


def bootstrap(config: Config, *, clock: Clock, ports: Ports = REAL_PORTS, demo: int = 0,
              on_failure: Callable[[], None] | None = None,
              http_best_effort: bool = False) -> ControlPlane:
    """The entry point (`herd up`, `herd sim`, the tests, the benchmarks): ``build_plane``
    with the real ports unless others are given (``control/ports.py``)."""
    return build_plane(config, clock=clock, ports=ports, demo=demo, on_failure=on_failure,
                       http_best_effort=http_best_effort)


def build_plane(config: Config, *, clock: Clock, ports: Ports, demo: int = 0,
                on_failure: Callable[[], None] | None = None,
                http_best_effort: bool = False) -> ControlPlane:
    """The control plane of ``config`` over ``ports``, not started. ``demo``: that many in-process
    agents with fake GPUs. ``http_best_effort``: the HTTP port is `herd up`'s default, so
    one in use leaves HTTP off with a warning (another herd up on this host) rather than
    stopping the start. ``on_failure``: called once it cannot go on (``failure``
    says why). Raises StartupError for a health policy that does not load."""
    cfg = config
    data_dir = Path(cfg.data_dir)
    node_id = validate_id(cfg.node_id or default_requester_id())
    try:
        policy = Policy.load(cfg.health.policy)
    except PolicyError as err:
        raise StartupError(str(err)) from err
    # which rules classify this fleet's reports: an operator reading the log of a start
    # must not have to guess whether health.policy was the file they edited
    log.info("health policy: %s: %s", cfg.health.policy or "built-in default",
             policy.summary())

    nc = ports.connection()
    projector = ProjectorRunner(nc, str(data_dir / "view.db"),
                                batch_size=cfg.projector.batch_size,
                                batch_interval=float(cfg.projector.batch_interval))
    rebuild_view = ViewRebuild(nc, projector, data_dir / "view.db", cfg.projector)
    parts: list[Part] = [DataDirLock(data_dir)]
    embedded: EmbeddedNats | None = None
    users: UserRegistry | None = None
    storage: StorageWatch | None = None
    supervisor: ServerSupervisor | None = None
    tls = cfg.nats.tls
    auth = NatsAuth(creds=cfg.nats.creds, tls_ca=tls.ca, tls_cert=tls.cert, tls_key=tls.key)
    if cfg.nats.url:
        url = cfg.nats.url
        # nats.auth here: the cluster's users are the operator's (`herd nats config
        # --auth`); the HTTP API takes the tokens of the bucket every replica shares.
    else:
        users = UserRegistry(data_dir / "nats") if cfg.nats.auth else None
        embedded = EmbeddedNats(data_dir / "nats", cfg.nats.port, cfg.nats.host,
                                cfg.nats.sync_interval,
                                users_conf=users.conf_path if users is not None else None,
                                liveness_shards=cfg.lifecycle.liveness_shards)
        url = embedded.url
        server = EmbeddedServer(embedded, users)
        supervisor = ServerSupervisor(embedded, clock, on_failure or (lambda: None))

        async def restart_server() -> None:
            await server.restart(nc)
            await rebuild_view.if_ahead()

        storage = StorageWatch(embedded.store_dir, restart_server)
        parts += [server, supervisor, Service("storage watch", storage.start, storage.stop)]
    def lost_stream_start(stream: str) -> int:
        """Where a stream missing at start begins: when the view on disk has a fleet it
        was lost, and begins after what was read (``streams_guard``); else 0, new."""
        checkpoint = integrity.checkpoint_of(data_dir / "view.db", EVENTS_STREAM)
        if not checkpoint:
            return 0
        return checkpoint + 1 if stream == EVENTS_STREAM else unreached_seq(clock.now())

    parts.append(NatsConnection(nc, url, connection_auth(auth, users),
                                f"herd-control:{node_id}", streams_of(cfg), lost_stream_start))
    # One node id, one live control plane: a second one is refused before it does anything.
    claim = ReplicaClaim(nc, node_id, ttl=float(cfg.leader_ttl), replicas=cfg.nats.replicas,
                         data_dir=data_dir)
    parts.append(Service("replica claim", claim.start, claim.stop))

    store = ports.store(nc, storage.full if storage is not None else None)

    async def start_projector() -> None:
        try:
            await projector.start()
        except ViewError as err:
            raise StartupError(str(err)) from err

    def folded(stream: str) -> int:
        """How far the projector read ``stream``: a recreated one starts after it."""
        return projector.folded_seq if stream == EVENTS_STREAM else 0

    async def catch_up() -> None:
        try:
            await projector.catch_up(timeout=CATCH_UP_TIMEOUT)
        except TimeoutError as err:   # its own message is empty: say what did not happen
            raise StartupError(
                f"the view did not catch up with {EVENTS_STREAM} within "
                f"{CATCH_UP_TIMEOUT:g}s (folded up to sequence {projector.folded_seq}"
                f"{'; ' + projector.failed if projector.failed else ''})") from err

    async def recreated(stream: str, first_seq: int, created: str) -> None:
        """HERD_EVENTS lost and created again: what folds it rebases its versions."""
        if stream == EVENTS_STREAM:
            breaker.rebase(first_seq)
            await projector.recreated(first_seq, created)

    liveness = LivenessPublisher(nc, cfg)

    async def positions() -> None:
        await open_bucket(nc, cfg.nats.replicas)

    owned: dict[str, Callable[[], Awaitable[None]]] = {
        f"KV_{LEASES_BUCKET}": lambda: lease.open_bucket(),
        SETTINGS_STREAM: liveness.publish, POSITIONS_STREAM: positions}
    if cfg.view.snapshots:
        async def snapshots_bucket() -> None:
            await create_snapshots_bucket(nc.jetstream(), replicas=cfg.nats.replicas)
        owned[SNAPSHOTS_STREAM] = snapshots_bucket
    streams_guard = StreamsGuard(nc, streams_of(cfg), floor=folded, buckets=owned,
                                 on_recreated=recreated, exact={EVENTS_STREAM}, clock=clock)
    agent_sync = AgentSync(nc)
    if cfg.view.snapshots:
        # A view that is missing or unusable starts from the newest usable snapshot.
        async def restore_view() -> None:
            await restore(nc, data_dir / "view.db")
        parts.append(Service("view restore", restore_view))
    parts += [Service("projector", start_projector, projector.stop),
              Service("streams guard", streams_guard.start, streams_guard.stop),
              Service("catch-up", catch_up),
              Service("agent sync", agent_sync.start, agent_sync.stop),
              Service("liveness settings", liveness.start)]
    metrics = Metrics() if cfg.metrics.port else None
    if metrics is not None:
        # Counted from here on: what the catch-up folded happened before this start.
        counting = metrics
        parts.append(Subscribed("metrics counting",
                                lambda: projector.nodes.subscribe(counting.on_node_event)))
    # Every episode of the log, seeded from it in the background (history/repairs_live.py).
    repairs = LiveRepairs(nc.jetstream(), projector.nodes, projector.instances,
                          lambda: projector.folded_seq,
                          gated=frozenset(cfg.validation.when) if cfg.validation.enabled
                          else frozenset())
    parts.append(Service("repairs", repairs.start, repairs.stop))
    if metrics is not None:
        metrics.registry.register(RepairCollector(repairs, clock))

    runner = DecideRunner(store, projector, clock)
    interval = min(REQUESTER_HEARTBEAT_INTERVAL, float(cfg.lifecycle.heartbeat_timeout) / 3)
    requester = NodeProtocol(node_id, actor=f"control:{node_id}", seqs=SeqAllocator(data_dir))
    sweeper = Sweeper(nc, store, projector, cfg, clock=clock, runner=runner)
    approver = AutoApprover(projector, cfg.approval.auto_approve, runner=runner)
    # The breaker decides from its own fold of herd.breaker.> (read whole on every start),
    # not from the projector's view: the one runner waits on that fold for it.
    breaker_fold = BreakerFold(nc)
    breaker = Breaker(breaker_fold, projector.nodes, cfg.breaker, clock=clock,
                      runner=runner.waiting_on(breaker_fold))
    if metrics is not None:
        metrics.registry.register(BreakerCollector(breaker, projector,
                                                   validation_waiting(cfg)))
    classifier = HealthClassifier(nc, projector, policy, cfg.health.unhealthy_threshold,
                                  pool_thresholds={name: pool.health.unhealthy_threshold
                                                   for name, pool in cfg.pools.items()},
                                  clock=clock, gate=breaker.gate, runner=runner)
    providers = ports.providers(ProviderSite(nc, data_dir, url,
                                             local_agent_args(cfg, url, users, embedded)))
    # Every replica keeps the latest GPU telemetry of each node: any of them answers gpu.*.
    telemetry = TelemetryIntake(nc, projector.nodes, clock)
    parts += [RequesterNode(nc, runner, projector.nodes, requester, this_host(),
                            interval=interval),
              Service("sweeper", refusing(sweeper.start, MappingMissing), sweeper.stop),
              *shard_leases(cfg, nc, node_id, sweeper, classifier),
              Service("approver", approver.start, approver.stop),
              Service("circuit breaker", breaker.start, breaker.stop),
              Subscribed("breaker counting",
                         lambda: projector.nodes.subscribe(breaker.on_node_event)),
              Service("health classifier", classifier.start, classifier.stop),
              Subscribed("telemetry forgetting",
                         lambda: telemetry.subscribe_to(projector.nodes)),
              Service("telemetry intake", telemetry.start, telemetry.stop),
              Service("providers", stop=functools.partial(stop_providers, providers))]

    # What must not run twice runs on the leader only (control/leader.py), built afresh
    # for every term.
    lease = LeaderLease(nc, node_id, ttl=float(cfg.leader_ttl), replicas=cfg.nats.replicas)

    def fingerprints() -> dict[str, str]:
        return {n: b.fingerprint for n, b in sweeper.beats.items() if b.fingerprint}

    parts += [
        Service("leader lease", lease.start, lease.stop),
        Service("leader catch-up", catch_up, leader_only=True),
        PerTerm("instance manager",
                lambda: InstanceManager(cfg, projector, sweeper, providers, clock=clock,
                                        gate=breaker.gate, runner=runner)),
        PerTerm("notifier", lambda: Notifier(
            cfg.notifier, projector, clock=clock, runner=runner,
            position=KvPosition(nc, NOTIFIER_KEY, holder=node_id, clock=clock,
                                replicas=cfg.nats.replicas),
            events=functools.partial(node_events, nc), validation=cfg.validation)),
        PerTerm("allocation reactor",
                lambda: AllocationReactor(projector, cfg, runner=runner)),
        PerTerm("scheduler", lambda: Scheduler(nc, projector, cfg, clock=clock, runner=runner)),
        PerTerm("sensitive reactor",
                lambda: SensitiveReactor(projector, cfg, fingerprints, clock=clock,
                                         gate=breaker.gate, runner=runner)),
        PerTerm("validation reactor",
                lambda: ValidationReactor(projector, cfg, clock=clock,
                                          gate=breaker.gate, runner=runner))]
    if cfg.view.snapshots:
        parts.append(PerTerm("view snapshots", lambda: SnapshotWriter(
            nc, data_dir / "view.db", lambda: projector.committed_seq, cfg.view, clock=clock,
            replicas=cfg.nats.replicas)))

    api = Api(nc, store, projector, sweeper, rebuild_view, node_id, cfg, metrics=metrics,
              clock=clock, breaker=breaker, runner=runner, telemetry=telemetry,
              faults=classifier.history, repairs=repairs)
    api.is_leader = lambda: lease.leader

    async def start_api() -> None:
        await api.start()
        # The API's subscriptions reach the server before start() returns, so a request
        # sent right after finds a responder.
        await nc.flush()

    parts.append(Service("api", start_api, api.stop))
    metrics_server: MetricsServer | None = None
    if metrics is not None:
        metrics_server = metrics_endpoint(cfg, metrics, projector, sweeper, nc, telemetry)
        parts.append(Service("metrics server", serving(metrics_server), metrics_server.stop))
    web_server = http_endpoint(cfg, api, sweeper, nc, clock, http_best_effort)
    if web_server is not None and isinstance(web_server.tokens, TokenBucket):
        bucket = web_server.tokens     # filled before the HTTP API serves

        async def start_tokens() -> None:
            await bucket.start()
            # deleted from outside: made again, and no token of the lost bucket counts
            await streams_guard.own(TOKENS_STREAM, bucket.open_bucket, bucket.renew)

        parts.append(Service("http tokens", start_tokens, bucket.stop))
    if web_server is not None:
        parts.append(Service("http server", serving_http(web_server), web_server.stop))
    if demo:
        parts.append(DemoAgents(nc, url, data_dir / "demo", demo, known=projector.nodes))
    return ControlPlane(
        config=cfg, clock=clock, node_id=node_id, data_dir=data_dir, url=url, nc=nc,
        store=store, providers=providers, runner=runner, projector=projector,
        sweeper=sweeper, approver=approver, classifier=classifier, agent_sync=agent_sync,
        streams_guard=streams_guard,
        lease=lease, api=api, rebuild_view=rebuild_view, parts=Parts(parts, lease),
        embedded=embedded, users=users, storage=storage, supervisor=supervisor,
        metrics=metrics, metrics_server=metrics_server, web=web_server)


def refusing(start: Callable[[], Awaitable[None]],
             *refusals: type[Exception]) -> Callable[[], Awaitable[None]]:
    """A part's start whose refusals (e.g. the heartbeat mapping missing from the server)
    stop the start with their one line, as every other refusal does."""
    async def started() -> None:
        try:
            await start()
        except refusals as err:
            raise StartupError(str(err)) from err
    return started


def streams_of(cfg: Config) -> list[StreamConfig]:
    return all_streams(cfg.nats.replicas, float(cfg.health.max_age), heartbeats_max_age(cfg))
