"""How one agent is told to run (``herd agent``'s flags, a test's or the simulator's
choices): ``AgentOptions``, and the node id a host names itself by default."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

from herdbook.credentials import NatsAuth
from herdbook.events.states import NodeClass


def default_node_id() -> str:
    host = socket.gethostname().split(".")[0]
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in host)[:128] or "node"


@dataclass
class AgentOptions:
    server: str = "nats://127.0.0.1:4222"
    node_id: str = field(default_factory=default_node_id)
    state_dir: str = "./.herd-agent"
    labels: dict[str, str] = field(default_factory=dict)
    node_class: NodeClass = NodeClass.STANDARD
    heartbeat_interval: float | None = None
    """None: a third of the control plane's heartbeat timeout for this node's class
    (``agent.heartbeat_interval``)."""
    info_interval: float = 60.0
    resource_interval: float = 30.0
    fake_gpus: int | None = None
    instance_id: str | None = None
    boot_retry_interval: float = 10.0
    boot_attempts: int = 3
    health_interval: float = 60.0
    fake_allocs: int = 0
    """Running allocations the heartbeat reports on top of the executor's (tests, demo)."""
    state_file: str | None = None
    """Where the executor keeps its workloads [default: <state_dir>/agent-state.json]."""
    fingerprint_interval: float = 6 * 3600.0
    """The conformance fingerprint is recomputed this often (and on request)."""
    wipe_config: str | None = None
    """YAML with the wipe steps of a sensitive node (default: the real ones, or fakes
    with --fake-gpus)."""
    auth: NatsAuth | None = None
    """User and password (or a creds file) and TLS towards NATS."""
    resync_interval: float = 300.0
    """A catch-up read of this node's allocation events at least this often, on top of
    the ones after every event and reconnect."""
    kmsg_source: str = "off"
    """Where XIDs of the kernel log come from (``agent.kmsg``): /dev/kmsg, file:PATH,
    journalctl or off (``herd agent`` defaults to /dev/kmsg without --fake-gpus)."""
    kmsg_poll_interval: float = 0.25
    telemetry_interval: float | None = 15.0
    """Between per-GPU telemetry samples on ``herd.gpu.<node>`` (``agent.telemetry``);
    None: off. A node without GPUs publishes none."""
    ib_sysfs: str = "/sys/class/infiniband"
    """Where the InfiniBand ports are read (``agent.infiniband``); ``off``, or a path that
    does not exist (a node without InfiniBand), turns the check off."""
    expected_gpus: int | None = None
    """The node's GPU count; fewer is a ``gpu_count`` fault. None: the count it registered
    with (the sentinel), once registered."""
    throttle_window: float = 300.0
    """How long HW throttling must last to be a fault (``agent.deep_checks``)."""

