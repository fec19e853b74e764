"""The YAML config, decoded into msgspec Structs. A bad file is refused with the key
path and the reason (``ConfigError``). Durations are written ``500ms``, ``2s``, ``5m``,
``1h`` (or a number of seconds; ``herdbook.durations``).

Every rule on a value is in its type, so msgspec refuses a bad value at decode: a word
from a list is a ``Literal`` or an enum (``NodeClass``), a range or a pattern is a
``Meta`` constraint whose ``description`` is the message, a rule across two fields of a
section is that section's ``__post_init__``. ``config_rules.explain`` turns msgspec's
error into the one line an operator reads. Only the rule across sections
(``lifecycle.heartbeats_max_age``) is checked after decoding."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import msgspec
import msgspec.yaml
from msgspec import Meta

from herdbook.config_notifier import ExecConfig as ExecConfig
from herdbook.config_notifier import NotifierConfig as NotifierConfig
from herdbook.config_notifier import SlurmConfig as SlurmConfig
from herdbook.config_notifier import WebhookConfig as WebhookConfig
from herdbook.config_rules import ConfigError as ConfigError
from herdbook.config_rules import PositiveDuration, Section, dec_hook, explain
from herdbook.durations import Duration
from herdbook.events.states import NodeClass
from herdbook.events.subjects import ID_PATTERN

Signal = Literal["SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGKILL"]
Port = Annotated[int, Meta(ge=0, le=65535, description="must be between 0 and 65535")]
# \A and \Z, not ^ and $: msgspec searches with re.search, whose $ also matches before a
# final newline.
_ID = ID_PATTERN.pattern.replace("^", "\\A").replace("$", "\\Z")


def _between(low: int, high: int) -> Meta:
    return Meta(ge=low, le=high, description=f"must be between {low} and {high}")


def _enc_hook(obj: Any) -> Any:
    raise NotImplementedError(f"cannot encode {type(obj)}")


class NatsTlsConfig(Section, frozen=True):
    """Client TLS towards ``nats.url`` (also ``--tls-ca``, ``--tls-cert``, ``--tls-key``)."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


class NatsConfig(Section, frozen=True):
    url: str | None = None
    """An existing NATS (cluster) to use instead of the embedded nats-server."""
    port: int = 4222
    """Port of the embedded nats-server (bound to 127.0.0.1)."""
    host: str = "127.0.0.1"
    replicas: Literal[1, 3, 5] = 1
    sync_interval: str | None = None
    """nats-server sync_interval for the embedded server (e.g. ``always``)."""
    auth: bool = False
    """Embedded server: require a user (`herd creds`); the control plane is herd-control."""
    creds: str | None = None
    """With ``url``: a creds file written by `herd creds` (or put user:pass in the URL)."""
    tls: NatsTlsConfig = NatsTlsConfig()


class ApprovalConfig(Section, frozen=True):
    auto_approve: bool = False


class GracePeriods(Section, frozen=True):
    standard: Duration = Duration(60.0)
    sensitive: Duration = Duration(300.0)
    borrowed: Duration = Duration(30.0)


class LifecycleConfig(Section, frozen=True):
    heartbeat_timeout: Duration = Duration(30.0)
    heartbeat_timeout_sensitive: Duration = Duration(120.0)
    grace_period: GracePeriods = GracePeriods()
    sweep_interval: Duration = Duration(0.2)
    boot_timeout: Duration = Duration(600.0)
    recover_down_on_heartbeat: bool = False
    """A DOWN node whose heartbeats resume from the same boot (a healed partition)
    returns to READY by itself; off: it stays DOWN, shown as heartbeating."""
    liveness_shards: Annotated[int, _between(1, 1024)] = 1
    """Heartbeat intake and the sweeper run per shard (DESIGN §10, ``events.hb_shards``):
    the NATS server maps herd.hb.<node> onto this many shards, each leased by one replica.
    1: no mapping, every replica sweeps the whole fleet."""
    heartbeats_max_age: Duration | None = None
    """Retention of HERD_HEARTBEATS: the last heartbeat of a node silent this long
    expires. At least the longest heartbeat timeout + grace period; unset: 1d, or twice
    that if it is longer (``heartbeats_max_age()``)."""


class ProjectorConfig(Section, frozen=True):
    batch_size: Annotated[int, _between(1, 10_000)] = 1000
    batch_interval: Duration = Duration(0.05)


class ViewConfig(Section, frozen=True):
    """Snapshots of the view in the HERD_VIEW_SNAPSHOTS object store (``control/snapshots.py``)."""

    snapshots: bool = True
    """The leader writes them; a control plane starting without a usable view restores one."""
    snapshot_every_events: Annotated[int, Meta(ge=1, description="must be at least 1")] = 100_000
    snapshot_every: PositiveDuration = PositiveDuration(600.0)
    """Or this long after the last one, if the view moved at all."""
    snapshots_kept: Annotated[int, Meta(ge=1, description="must be at least 1")] = 3


class HealthStreamConfig(Section, frozen=True):
    max_age: Duration = Duration(7 * 86400.0)
    """Retention of HERD_HEALTH."""
    policy: str | None = None
    """A CEL policy YAML file; the built-in default when unset."""
    unhealthy_threshold: int = 2
    """Consecutive unhealthy reports before a node is UNHEALTHY (one fatal event is enough)."""


class PoolHealthConfig(Section, frozen=True):
    auto_replace: bool = False
    unhealthy_threshold: int = 2
    replace_on_hardware_fault: bool | None = None
    """Auto-replace a node whose verdict says ``inspect_hardware`` too; unset: yes where a
    replacement is other hardware (``fake``: cloud-like VMs), no where it is the same
    machine (``local``, bare metal): ``reactors.pools.replaces_hardware_faults``."""


_MIN_MAX = Meta(ge=0, description="need 0 <= min_nodes <= max_nodes")


class PoolConfig(Section, frozen=True):
    provider: Literal["local", "fake"] = "local"
    """local (real `herd agent` processes on this host) or fake (in-process agents)."""
    min_nodes: Annotated[int, _MIN_MAX] = 0
    max_nodes: Annotated[int, _MIN_MAX] = 10
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_class: NodeClass = msgspec.field(default=NodeClass.STANDARD, name="class")
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

    def __post_init__(self) -> None:
        if self.min_nodes > self.max_nodes:
            raise ValueError(_MIN_MAX.description)


class InstanceManagerConfig(Section, frozen=True):
    registration_timeout: Duration = Duration(600.0)
    stale_check_interval: Duration = Duration(60.0)
    reconcile_interval: Duration = Duration(2.0)


class SchedulerConfig(Section, frozen=True):
    """Nomad's evaluation broker and scheduler (DESIGN §6)."""

    nack_timeout: Duration = Duration(60.0)
    """The broker consumer's ack_wait: an eval not acked by then is delivered again."""
    delivery_limit: Annotated[int, _between(1, 100)] = 3
    """The broker consumer's max_deliver: then the eval fails and a failed-follow-up
    eval is created with ``failed_follow_up_delay``."""
    failed_follow_up_delay: Duration = Duration(60.0)
    max_plan_attempts: Annotated[int, _between(1, 100)] = 5
    eval_gc_threshold: Duration = Duration(3600.0)
    gc_interval: Duration = Duration(300.0)
    unblock_delay: Duration = Duration(0.5)
    """Blocked evals are retried this long after capacity appears (debounce)."""


class AllocationsConfig(Section, frozen=True):
    kill_timeout: Duration = Duration(30.0)
    """A stopped workload gets SIGTERM, then SIGKILL after this."""
    checkpoint_signal: Signal = "SIGUSR1"
    """Sent first on ``drain --urgent`` so a workload can checkpoint."""
    checkpoint_grace: Duration = Duration(60.0)
    """How long an urgent drain waits after the checkpoint signal before stopping."""


class SensitiveConfig(Section, frozen=True):
    """Lattice's sensitive-node rules."""

    wipe_timeout: Duration = Duration(1800.0)
    """A wipe not confirmed by then: QUARANTINED."""
    conformance_interval: Duration = Duration(30.0)
    """How often the control plane compares the fleet's conformance fingerprints."""


class BreakerConfig(Section, frozen=True):
    """The fleet-wide circuit breaker (``reactors/breaker.py``)."""

    enabled: bool = True
    max_share: Annotated[float, Meta(gt=0, le=1, description="need 0 < max_share <= 1")] = 0.10
    """Automatic take-outs allowed within ``window``, as a share of the fleet and of each
    pool (approved compute nodes); one more is held and the scope trips."""
    window: Duration = Duration(3600.0)
    min_nodes: Annotated[int, Meta(ge=0, description="must be at least 0")] = 2
    """This many take-outs per scope are always allowed, whatever the share (tiny fleets)."""


ValidationTrigger = Literal["returned", "approved"]
VALIDATION_TRIGGERS: tuple[ValidationTrigger, ...] = get_args(ValidationTrigger)
# A number of validations, or a share of the fleet: more than 0%, at most 100%.
_SHARE = r"\A\s*(?!0*(?:\.0*)?%)(?:100(?:\.0+)?|[0-9]{1,2}(?:\.[0-9]+)?)%\s*\Z"
Concurrency = Annotated[
    Annotated[int, Meta(ge=0)] | Annotated[str, Meta(pattern=_SHARE)],
    Meta(description='must be a number (0: no bound) or a share of the fleet such as "10%" '
                     "(more than 0%, at most 100%)")]


class ValidationConfig(Section, frozen=True):
    """The validation gate (docs/remediation.md#validation): ``command`` runs on a node,
    as an allocation holding all its GPUs, before the node is back in service."""

    name: Annotated[str, Meta(pattern=_ID, description="1-128 of A-Z a-z 0-9 _ -")] = "validation"
    command: list[Annotated[str, Meta(min_length=1, description=(
        'an empty word; name the check to run, e.g. [dcgmi, diag, -r, "2"]'))]] = \
        msgspec.field(default_factory=list)
    """Run by the node's agent; exit 0 passes. E.g. [dcgmi, diag, -r, "2"]. Empty (the
    default): no validation gate, a node is back in service when its boot check passes."""
    timeout: PositiveDuration = PositiveDuration(1800.0)
    """A check still running this long after it was placed fails (and is killed)."""
    when: list[ValidationTrigger] = msgspec.field(
        default_factory=lambda: list(VALIDATION_TRIGGERS))
    """When it runs besides on demand (`herd node validate`): returned (after DOWN,
    FAILED or UNHEALTHY), approved (a node's first approval)."""
    quarantine_after: Annotated[int, Meta(ge=0, description="must be at least 0")] = 2
    """Failed validations within ``window`` that quarantine the node (0: never)."""
    window: PositiveDuration = PositiveDuration(86400.0)
    max_concurrent: Concurrency = "10%"
    """Validations started automatically while this many run: a number, or a share of the
    fleet ("10%": of the approved compute nodes not TERMINATED, rounded up, at least 1);
    0: no bound. A due node waits (out of service) for a free slot; `herd node validate`
    is not held by it but its checks count."""

    @property
    def enabled(self) -> bool:
        return bool(self.command)

    def concurrency(self, fleet: int) -> int | None:
        """How many validations may run at once in a fleet of ``fleet`` nodes; None: no
        bound. ``max_concurrent`` is checked at decode (its type, ``Concurrency``)."""
        bound = self.max_concurrent
        if isinstance(bound, int):
            return bound or None
        share = float(bound.strip().removesuffix("%")) / 100
        return max(1, math.ceil(share * fleet - 1e-9))


class MetricsConfig(Section, frozen=True):
    port: Port = 0
    """Serve Prometheus ``GET /metrics`` on this port; 0: off (also ``--metrics-port``)."""
    host: str = "127.0.0.1"


class HttpConfig(Section, frozen=True):
    port: Port | None = None
    """Serve the HTTP API and the console on this port; 0: off (also ``--http-port``);
    unset: 8641 under `herd up`, off where a control plane runs in-process (tests, sim)."""
    host: str = "127.0.0.1"
    """Without ``nats.auth`` only a loopback address (also ``--http-host``)."""


class Config(Section, frozen=True):
    nats: NatsConfig = NatsConfig()
    data_dir: str = "./.herd"
    node_id: str | None = None
    """ID of this control plane's requester node (default: requester-<hostname>)."""
    approval: ApprovalConfig = ApprovalConfig()
    lifecycle: LifecycleConfig = LifecycleConfig()
    projector: ProjectorConfig = ProjectorConfig()
    view: ViewConfig = ViewConfig()
    health: HealthStreamConfig = HealthStreamConfig()
    pools: dict[Annotated[str, Meta(pattern=_ID, description=(
        "a pool name is 1-128 of A-Z a-z 0-9 _ -"))], PoolConfig] = \
        msgspec.field(default_factory=dict)
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
    except msgspec.DecodeError as err:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from err
    # A file of only comments is an empty document: all defaults.
    document = {} if document is None else document
    try:
        config = msgspec.convert(document, Config, dec_hook=dec_hook)
    except msgspec.ValidationError as err:
        raise ConfigError(f"{source}: {explain(str(err), Config, document, dec_hook)}") from err
    # The one rule across sections: not a type's.
    max_age = config.lifecycle.heartbeats_max_age
    if max_age is not None and max_age < longest_silence(config):
        raise ConfigError(f"{source}: lifecycle.heartbeats_max_age: must be at least "
                          f"{longest_silence(config):g}s (the longest heartbeat timeout + "
                          "grace period), or a restart forgets when a silent node was last "
                          "seen")
    return config


def to_builtins(config: Config) -> Any:
    return msgspec.to_builtins(config, enc_hook=_enc_hook)


def grace_period(config: Config, node_class: NodeClass) -> float:
    return float(getattr(config.lifecycle.grace_period, node_class,
                         config.lifecycle.grace_period.standard))


def heartbeat_timeout(config: Config, node_class: NodeClass) -> float:
    if node_class == NodeClass.SENSITIVE:
        return float(config.lifecycle.heartbeat_timeout_sensitive)
    return float(config.lifecycle.heartbeat_timeout)


def longest_silence(config: Config) -> float:
    """The longest a node of any class may be silent before it is DOWN."""
    return max(heartbeat_timeout(config, cls) + grace_period(config, cls)
               for cls in NodeClass)


def heartbeats_max_age(config: Config) -> float:
    """Retention of HERD_HEARTBEATS: ``lifecycle.heartbeats_max_age``, or else 1 day
    (twice the longest silence if that is longer)."""
    if config.lifecycle.heartbeats_max_age is not None:
        return float(config.lifecycle.heartbeats_max_age)
    return max(86400.0, 2 * longest_silence(config))
