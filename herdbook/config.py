"""The YAML config, decoded into msgspec Structs. A bad file is refused with the key
path and the reason (``ConfigError``). Durations are written ``500ms``, ``2s``, ``5m``,
``1h`` (or a number of seconds; ``herdbook.durations``)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import msgspec
import msgspec.yaml

from herdbook.durations import Duration, parse_duration
from herdbook.events.errors import error_path
from herdbook.events.subjects import ID_PATTERN

SIGNALS = frozenset({"SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT",
                     "SIGKILL"})


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Duration:
        return parse_duration(obj)
    raise NotImplementedError(f"cannot decode {typ}")


def _enc_hook(obj: Any) -> Any:
    raise NotImplementedError(f"cannot encode {type(obj)}")


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    pass


class NatsTlsConfig(_Section, frozen=True):
    """Client TLS towards ``nats.url`` (also ``--tls-ca``, ``--tls-cert``, ``--tls-key``)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


class NatsConfig(_Section, frozen=True):
    url: str | None = None
    """An existing NATS (cluster) to use instead of the embedded nats-server."""
    port: int = 4222
    """Port of the embedded nats-server (bound to 127.0.0.1)."""
    host: str = "127.0.0.1"
    replicas: int = 1
    sync_interval: str | None = None
    """nats-server sync_interval for the embedded server (e.g. ``always``)."""
    auth: bool = False
    """Embedded server: require a user (`herd creds`); the control plane is herd-control."""
    creds: str | None = None
    """With ``url``: a creds file written by `herd creds` (or put user:pass in the URL)."""
    tls: NatsTlsConfig = NatsTlsConfig()


class ApprovalConfig(_Section, frozen=True):
    auto_approve: bool = False


class GracePeriods(_Section, frozen=True):
    standard: Duration = Duration(60.0)
    sensitive: Duration = Duration(300.0)
    borrowed: Duration = Duration(30.0)


class LifecycleConfig(_Section, frozen=True):
    heartbeat_timeout: Duration = Duration(30.0)
    heartbeat_timeout_sensitive: Duration = Duration(120.0)
    grace_period: GracePeriods = GracePeriods()
    sweep_interval: Duration = Duration(0.2)
    boot_timeout: Duration = Duration(600.0)
    recover_down_on_heartbeat: bool = False
    """A DOWN node whose heartbeats resume from the same boot (a healed partition)
    returns to READY by itself; off: it stays DOWN, shown as heartbeating."""
    liveness_shards: int = 1
    """Heartbeat intake and the sweeper run per shard (DESIGN §10, ``events.hb_shards``):
    the NATS server maps herd.hb.<node> onto this many shards, each leased by one replica.
    1: no mapping, every replica sweeps the whole fleet."""
    heartbeats_max_age: Duration | None = None
    """Retention of HERD_HEARTBEATS: the last heartbeat of a node silent this long
    expires. At least the longest heartbeat timeout + grace period; unset: 1d, or twice
    that if it is longer (``heartbeats_max_age()``)."""


class ProjectorConfig(_Section, frozen=True):
    batch_size: int = 1000
    batch_interval: Duration = Duration(0.05)


class ViewConfig(_Section, frozen=True):
    """Snapshots of the view in the HERD_VIEW_SNAPSHOTS object store (``control/snapshots.py``)."""

    snapshots: bool = True
    """The leader writes them; a control plane starting without a usable view restores one."""
    snapshot_every_events: int = 100_000
    snapshot_every: Duration = Duration(600.0)
    """Or this long after the last one, if the view moved at all."""
    snapshots_kept: int = 3


class HealthStreamConfig(_Section, frozen=True):
    max_age: Duration = Duration(7 * 86400.0)
    """Retention of HERD_HEALTH."""
    policy: str | None = None
    """A CEL policy YAML file; the built-in default when unset."""
    unhealthy_threshold: int = 2
    """Consecutive unhealthy reports before a node is UNHEALTHY (one fatal event is enough)."""


class PoolHealthConfig(_Section, frozen=True):
    auto_replace: bool = False
    unhealthy_threshold: int = 2
    replace_on_hardware_fault: bool | None = None
    """Auto-replace a node whose verdict says ``inspect_hardware`` too; unset: yes where a
    replacement is other hardware (``fake``: cloud-like VMs), no where it is the same
    machine (``local``, bare metal): ``reactors.pools.replaces_hardware_faults``."""


class PoolConfig(_Section, frozen=True):
    provider: str = "local"
    """local (real `herd agent` processes on this host) or fake (in-process agents)."""
    min_nodes: int = 0
    max_nodes: int = 10
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_class: str = msgspec.field(default="standard", name="class")
    cooldown: Duration = Duration(300.0)
    """At most one auto-replacement per cooldown, so a flapping node is not replaced in a loop."""
    health: PoolHealthConfig = PoolHealthConfig()
    fake_gpus: int = 8
    heartbeat_interval: Duration = Duration(10.0)
    expected_fingerprint: str | None = None
    """The conformance fingerprint this pool's nodes must have; unset: the majority."""
    agent_command: list[str] | None = None
    """local provider: run this instead of `herd agent` (e.g. to test an agent that
    never starts); {node_id}, {instance_id}, {server}, {state_dir} are filled in."""


class InstanceManagerConfig(_Section, frozen=True):
    registration_timeout: Duration = Duration(600.0)
    stale_check_interval: Duration = Duration(60.0)
    reconcile_interval: Duration = Duration(2.0)


class WebhookConfig(_Section, frozen=True):
    cordon_url: str | None = None
    uncordon_url: str | None = None
    drain_url: str | None = None
    undrain_url: str | None = None
    drain_status_url: str | None = None
    """GET ``?node_id=`` -> ``{"drained": bool, "message": str}``; DRAINED waits for it."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout: Duration = Duration(10.0)


class ExecConfig(_Section, frozen=True):
    """Command templates; {node_id} and {reason} are filled in (shell-quoted)."""

    cordon: str | None = None
    uncordon: str | None = None
    drain: str | None = None
    undrain: str | None = None
    drain_status: str | None = None
    """Exit code 0 means drained."""
    timeout: Duration = Duration(30.0)


class SlurmConfig(_Section, frozen=True):
    """``scontrol update`` (no shell): cordon, drain -> State=DRAIN Reason="herdbook: ...";
    uncordon, undrain -> State=RESUME; DRAINED when Slurm says IDLE+DRAIN or DOWN+DRAIN."""

    node_name: str = "{node_id}"
    """The Slurm node name: ``{node_id}`` and ``{label:KEY}`` (the node's label KEY) with
    fixed text around them, e.g. ``gpu-{node_id}`` or ``{label:slurm-node}``."""
    scontrol: str = "scontrol"
    conf: str | None = None
    """SLURM_CONF for scontrol (default: Slurm's own, /etc/slurm/slurm.conf)."""
    timeout: Duration = Duration(10.0)
    drain_status: bool = True
    """DRAINED waits for Slurm to say drained (no jobs left on the node)."""


class NotifierConfig(_Section, frozen=True):
    type: str = "none"
    """none, webhook, exec or slurm: tells the workload system (Kubernetes, Slurm) about
    cordon, uncordon, drain and undrain."""
    webhook: WebhookConfig = WebhookConfig()
    exec: ExecConfig = ExecConfig()
    slurm: SlurmConfig = SlurmConfig()
    retries: int = 3
    backoff: Duration = Duration(1.0)
    drain_status_interval: Duration = Duration(5.0)


class SchedulerConfig(_Section, frozen=True):
    """Nomad's evaluation broker and scheduler (DESIGN §6)."""

    nack_timeout: Duration = Duration(60.0)
    """The broker consumer's ack_wait: an eval not acked by then is delivered again."""
    delivery_limit: int = 3
    """The broker consumer's max_deliver: then the eval fails and a failed-follow-up
    eval is created with ``failed_follow_up_delay``."""
    failed_follow_up_delay: Duration = Duration(60.0)
    max_plan_attempts: int = 5
    eval_gc_threshold: Duration = Duration(3600.0)
    gc_interval: Duration = Duration(300.0)
    unblock_delay: Duration = Duration(0.5)
    """Blocked evals are retried this long after capacity appears (debounce)."""


class AllocationsConfig(_Section, frozen=True):
    kill_timeout: Duration = Duration(30.0)
    """A stopped workload gets SIGTERM, then SIGKILL after this."""
    checkpoint_signal: str = "SIGUSR1"
    """Sent first on ``drain --urgent`` so a workload can checkpoint."""
    checkpoint_grace: Duration = Duration(60.0)
    """How long an urgent drain waits after the checkpoint signal before stopping."""


class SensitiveConfig(_Section, frozen=True):
    """Lattice's sensitive-node rules."""

    wipe_timeout: Duration = Duration(1800.0)
    """A wipe not confirmed by then: QUARANTINED."""
    conformance_interval: Duration = Duration(30.0)
    """How often the control plane compares the fleet's conformance fingerprints."""


class BreakerConfig(_Section, frozen=True):
    """The fleet-wide circuit breaker (``reactors/breaker.py``)."""

    enabled: bool = True
    max_share: float = 0.10
    """Automatic take-outs allowed within ``window``, as a share of the fleet and of each
    pool (approved compute nodes); one more is held and the scope trips."""
    window: Duration = Duration(3600.0)
    min_nodes: int = 2
    """This many take-outs per scope are always allowed, whatever the share (tiny fleets)."""


VALIDATION_TRIGGERS = ("returned", "approved")


class ValidationConfig(_Section, frozen=True):
    """The validation gate (docs/remediation.md#validation): ``command`` runs on a node,
    as an allocation holding all its GPUs, before the node is back in service."""

    name: str = "validation"
    command: list[str] = msgspec.field(default_factory=list)
    """Run by the node's agent; exit 0 passes. E.g. [dcgmi, diag, -r, "2"]. Empty (the
    default): no validation gate, a node is back in service when its boot check passes."""
    timeout: Duration = Duration(1800.0)
    """A check still running this long after it was placed fails (and is killed)."""
    when: list[str] = msgspec.field(default_factory=lambda: list(VALIDATION_TRIGGERS))
    """When it runs besides on demand (`herd node validate`): returned (after DOWN,
    FAILED or UNHEALTHY), approved (a node's first approval)."""
    quarantine_after: int = 2
    """Failed validations within ``window`` that quarantine the node (0: never)."""
    window: Duration = Duration(86400.0)
    max_concurrent: int | str = "10%"
    """Validations started automatically while this many run: a number, or a share of the
    fleet ("10%": of the approved compute nodes not TERMINATED, rounded up, at least 1);
    0: no bound. A due node waits (out of service) for a free slot; `herd node validate`
    is not held by it but its checks count."""

    @property
    def enabled(self) -> bool:
        return bool(self.command)

    def concurrency(self, fleet: int) -> int | None:
        """How many validations may run at once in a fleet of ``fleet`` nodes; None: no
        bound. ``max_concurrent`` is checked at load (``_check_validation``)."""
        bound = self.max_concurrent
        if isinstance(bound, int):
            return bound or None
        share = float(bound.strip().removesuffix("%")) / 100
        return max(1, math.ceil(share * fleet - 1e-9))


class MetricsConfig(_Section, frozen=True):
    port: int = 0
    """Serve Prometheus ``GET /metrics`` on this port; 0: off (also ``--metrics-port``)."""
    host: str = "127.0.0.1"


class HttpConfig(_Section, frozen=True):
    port: int | None = None
    """Serve the HTTP API and the console on this port; 0: off (also ``--http-port``);
    unset: 8641 under `herd up`, off where a control plane runs in-process (tests, sim)."""
    host: str = "127.0.0.1"
    """Without ``nats.auth`` only a loopback address (also ``--http-host``)."""


class Config(_Section, frozen=True):
    nats: NatsConfig = NatsConfig()
    data_dir: str = "./.herd"
    node_id: str | None = None
    """ID of this control plane's requester node (default: requester-<hostname>)."""
    approval: ApprovalConfig = ApprovalConfig()
    lifecycle: LifecycleConfig = LifecycleConfig()
    projector: ProjectorConfig = ProjectorConfig()
    view: ViewConfig = ViewConfig()
    health: HealthStreamConfig = HealthStreamConfig()
    pools: dict[str, PoolConfig] = msgspec.field(default_factory=dict)
    instance_manager: InstanceManagerConfig = InstanceManagerConfig()
    notifier: NotifierConfig = NotifierConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    allocations: AllocationsConfig = AllocationsConfig()
    metrics: MetricsConfig = MetricsConfig()
    http: HttpConfig = HttpConfig()
    sensitive: SensitiveConfig = SensitiveConfig()
    breaker: BreakerConfig = BreakerConfig()
    validation: ValidationConfig = ValidationConfig()
    leader_ttl: Duration = Duration(6.0)
    """Replicas: the leader's lease expires this long after its last renewal."""


class ConfigError(ValueError):
    pass


_PERCENT = re.compile(r"[0-9]+(\.[0-9]+)?%")


def _check_validation(validation: ValidationConfig, source: str) -> None:
    if not all(validation.command):
        raise ConfigError(f"{source}: validation.command: an empty word; name the check to "
                          "run, e.g. [dcgmi, diag, -r, \"2\"]")
    if not ID_PATTERN.fullmatch(validation.name):
        raise ConfigError(f"{source}: validation.name: 1-128 of A-Z a-z 0-9 _ -")
    if float(validation.timeout) <= 0:
        raise ConfigError(f"{source}: validation.timeout: must be more than 0")
    bad = [w for w in validation.when if w not in VALIDATION_TRIGGERS]
    if bad:
        raise ConfigError(f"{source}: validation.when: {bad[0]!r} is not one of "
                          + ", ".join(VALIDATION_TRIGGERS))
    if validation.quarantine_after < 0 or float(validation.window) <= 0:
        raise ConfigError(f"{source}: validation: quarantine_after must be >= 0 and window "
                          "more than 0")
    bound = validation.max_concurrent
    if isinstance(bound, int):
        if bound < 0:
            raise ConfigError(f"{source}: validation.max_concurrent: must be >= 0 (0: no "
                              "bound)")
    elif not (_PERCENT.fullmatch(bound.strip())
              and 0 < float(bound.strip().removesuffix("%")) <= 100):
        raise ConfigError(f"{source}: validation.max_concurrent: {bound!r} is neither a "
                          "number nor a share of the fleet such as \"10%\" (more than 0%, "
                          "at most 100%)")


def load_config(path: str | Path | None) -> Config:
    if path is None:
        return Config()
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: {err.strerror}") from err
    return parse_config(raw, str(path))


def parse_config(raw: bytes | str, source: str = "config") -> Config:
    try:
        document = msgspec.yaml.decode(raw or b"{}")
        # A file of only comments is an empty document: all defaults.
        config = msgspec.convert({} if document is None else document, Config,
                                 dec_hook=_dec_hook)
    except msgspec.ValidationError as err:
        raise ConfigError(f"{source}: {error_path(str(err))}") from err
    except msgspec.DecodeError as err:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from err
    if config.nats.replicas not in (1, 3, 5):
        raise ConfigError(f"{source}: nats.replicas: must be 1, 3 or 5")
    for name, pool in config.pools.items():
        if not ID_PATTERN.fullmatch(name):
            raise ConfigError(f"{source}: pools.{name}: a pool name is 1-128 of A-Z a-z 0-9 _ -")
        if pool.provider not in ("local", "fake"):
            raise ConfigError(f"{source}: pools.{name}.provider: {pool.provider!r} is not one of "
                              "local, fake")
        if not 0 <= pool.min_nodes <= pool.max_nodes:
            raise ConfigError(f"{source}: pools.{name}: need 0 <= min_nodes <= max_nodes")
        if pool.node_class not in ("standard", "sensitive", "borrowed"):
            raise ConfigError(f"{source}: pools.{name}.class: {pool.node_class!r} is not one of "
                              "standard, sensitive, borrowed")
    if config.notifier.type not in ("none", "webhook", "exec", "slurm"):
        raise ConfigError(f"{source}: notifier.type: {config.notifier.type!r} is not one of "
                          "none, webhook, exec, slurm")
    if not re.fullmatch(r"(?:[^{}]|\{node_id\}|\{label:[^{}]+\})+", config.notifier.slurm.node_name):
        raise ConfigError(f"{source}: notifier.slurm.node_name: only {{node_id}} and "
                          "{label:KEY} may stand in braces")
    if not 1 <= config.scheduler.delivery_limit <= 100:
        raise ConfigError(f"{source}: scheduler.delivery_limit: must be between 1 and 100")
    if not 1 <= config.scheduler.max_plan_attempts <= 100:
        raise ConfigError(f"{source}: scheduler.max_plan_attempts: must be between 1 and 100")
    if config.allocations.checkpoint_signal not in SIGNALS:
        raise ConfigError(f"{source}: allocations.checkpoint_signal: "
                          f"{config.allocations.checkpoint_signal!r} is not a signal name "
                          "like SIGUSR1")
    _check_validation(config.validation, source)
    if not 1 <= config.projector.batch_size <= 10_000:
        raise ConfigError(f"{source}: projector.batch_size: must be between 1 and 10000")
    if not 1 <= config.lifecycle.liveness_shards <= 1024:
        raise ConfigError(f"{source}: lifecycle.liveness_shards: must be between 1 and 1024")
    if config.view.snapshot_every_events < 1 or config.view.snapshots_kept < 1:
        raise ConfigError(f"{source}: view: snapshot_every_events and snapshots_kept must be "
                          "at least 1")
    if float(config.view.snapshot_every) <= 0:
        raise ConfigError(f"{source}: view.snapshot_every: must be more than 0")
    max_age = config.lifecycle.heartbeats_max_age
    if max_age is not None and max_age < longest_silence(config):
        raise ConfigError(f"{source}: lifecycle.heartbeats_max_age: must be at least "
                          f"{longest_silence(config):g}s (the longest heartbeat timeout + "
                          "grace period), or a restart forgets when a silent node was last "
                          "seen")
    if not 0 < config.breaker.max_share <= 1 or config.breaker.min_nodes < 0:
        raise ConfigError(f"{source}: breaker: need 0 < max_share <= 1 and min_nodes >= 0")
    if not 0 <= config.metrics.port <= 65535:
        raise ConfigError(f"{source}: metrics.port: must be between 0 and 65535")
    if config.http.port is not None and not 0 <= config.http.port <= 65535:
        raise ConfigError(f"{source}: http.port: must be between 0 and 65535")
    return config


def to_builtins(config: Config) -> Any:
    return msgspec.to_builtins(config, enc_hook=_enc_hook)


def grace_period(config: Config, node_class: str) -> float:
    return float(getattr(config.lifecycle.grace_period, node_class,
                         config.lifecycle.grace_period.standard))


def heartbeat_timeout(config: Config, node_class: str) -> float:
    if node_class == "sensitive":
        return float(config.lifecycle.heartbeat_timeout_sensitive)
    return float(config.lifecycle.heartbeat_timeout)


def longest_silence(config: Config) -> float:
    """The longest a node of any class may be silent before it is DOWN."""
    return max(heartbeat_timeout(config, cls) + grace_period(config, cls)
               for cls in ("standard", "sensitive", "borrowed"))


def heartbeats_max_age(config: Config) -> float:
    """Retention of HERD_HEARTBEATS: ``lifecycle.heartbeats_max_age``, or else 1 day
    (twice the longest silence if that is longer)."""
    if config.lifecycle.heartbeats_max_age is not None:
        return float(config.lifecycle.heartbeats_max_age)
    return max(86400.0, 2 * longest_silence(config))
