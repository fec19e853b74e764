"""The API's replies about nodes and their GPUs: a node in a list, described, after a
command; a GPU in a list and described."""

from __future__ import annotations

from typing import Any

import msgspec

from herdbook.api.envelope import _Reply
from herdbook.events.states import (
    Approval,
    Health,
    Intent,
    Lifecycle,
    NodeClass,
    NodeType,
)


class NodeSummary(_Reply, frozen=True, kw_only=True):
    """A node in ``node.list``. ``heartbeating``: a heartbeat arrived within the node's
    heartbeat_timeout (a DOWN node whose partition healed shows as DOWN but
    heartbeating)."""

    id: str
    type: NodeType
    node_class: NodeClass = msgspec.field(name="class")
    approval: Approval
    lifecycle: Lifecycle
    health: Health
    intent: Intent
    state: str
    schedulable: bool
    labels: dict[str, str]
    pool: str | None
    last_heartbeat: str | None
    heartbeat_age: float | None
    heartbeating: bool
    allocations: int
    gpus: int
    fingerprint_group: str | None
    claimed_by: str | None


class GpuDevice(_Reply, frozen=True, kw_only=True):
    index: int
    uuid: str
    name: str
    memory_bytes: int


class NodeDetail(NodeSummary, frozen=True, kw_only=True):
    """A node with everything known about it: ``node.list`` with ``wide``, the node of a
    command's result, and the base of ``node.describe``."""

    hostname: str
    arch: str
    os: str
    cpus: int
    memory_bytes: int
    gpu_devices: list[GpuDevice]
    agent_version: str
    instance_id: str | None
    boot_id: str
    registered_at: str | None
    updated_at: str | None
    approval_reason: str
    approval_actor: str
    approval_at: str | None
    lifecycle_reason: str
    lifecycle_at: str | None
    intent_reason: str
    intent_actor: str
    intent_at: str | None
    drain_urgent: bool
    drain_deadline: str | None
    boot_failures: int
    health_reason: str
    notification_error: str
    boot_checks: dict[str, str]
    last_event: str
    fingerprint: str | None
    fingerprint_expected: str | None
    drift: bool
    tenant: str | None
    claimed_at: str | None
    wipe_status: str | None
    wipe_attempt: int
    wipe_steps: dict[str, str]
    version: int
    recommended_action: str | None = None
    """What to do about the node's health verdict (``health.actions``): none,
    restart_workload, reset_gpu, reboot_node or inspect_hardware; None before a verdict
    recorded one."""
    validation: str | None = None
    """The node's last validation (docs/remediation.md#validation): running (the node is
    VALIDATING), passed, failed, interrupted (it went DOWN meanwhile); None: never
    validated."""
    validation_due: str | None = None
    """Why it must be validated before it is back in service: returned (it was DOWN,
    FAILED or UNHEALTHY), approved (its first approval); None: it need not be."""
    validation_trigger: str | None = None
    """What started the last validation: returned, approved or operator."""
    validation_check: str | None = None
    """The check's name (``validation.name``)."""
    validation_alloc: str | None = None
    """The allocation that runs (ran) the check: `herd alloc status ID`."""
    validation_started_at: str | None = None
    validation_at: str | None = None
    """When the last validation ended (None while it runs)."""
    validation_reason: str | None = None
    """How the last validation ended (or why it runs), in one line."""


class GpuSummary(_Reply, frozen=True, kw_only=True):
    """A GPU in ``gpu.list``: identity, health with its cause (the classifier's verdict,
    ``NodeView.gpus``), its node's state, and the main readings of its latest telemetry
    sample (None: not measured, or no sample yet)."""

    node_id: str
    index: int
    uuid: str | None
    serial: str | None
    model: str | None
    hostname: str | None
    health: str
    """One of ``GPU_HEALTH``."""
    cause: str | None
    """The verdict's reason ("rule: what matched"), None for a healthy GPU."""
    since: str | None
    """When the verdict was first decided (the report's stored time)."""
    node_state: str
    node_health: Health
    pool: str | None
    temperature_c: float | None
    power_w: float | None
    gpu_util_pct: float | None
    fb_used_mib: float | None
    fb_total_mib: float | None
    sampled_at: str | None
    """When the agent sampled the readings (its clock)."""
    recommended_action: str | None = None
    """What to do about the GPU's verdict (``health.actions``); None for a healthy GPU."""
    power_limit_w: float | None = None
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    remapped_rows_uncorrectable: int | None = None
    """The error counters a fleet GPU table sorts by (the console's GPU view)."""


class GpuFault(_Reply, frozen=True, kw_only=True):
    at: str
    kind: str
    xid: int | None


class GpuPull(_Reply, frozen=True, kw_only=True):
    """The GPU (by serial) took a node out: a critical or fatal verdict on one of its
    events, once per node and boot."""

    at: str
    node_id: str
    boot_id: str


class GpuVerdictReply(_Reply, frozen=True, kw_only=True):
    level: str
    rule: str
    reason: str
    kind: str
    xid: int | None
    since: str | None
    recommended_action: str | None = None
    """What to do about it (``health.actions``)."""


class GpuDetail(GpuSummary, frozen=True, kw_only=True):
    """``gpu.describe``: the summary, every reading of the latest sample, the verdict
    with its cause, the GPU's recent faults and their counts (the classifier's fault
    history: HERD_HEALTH's reports of the last 7 days), and the serial's history
    across nodes: when it took a node out, and which nodes list it now."""

    pci_bus_id: str | None
    driver_version: str | None
    readings: dict[str, Any] | None
    received_at: str | None
    verdict: GpuVerdictReply | None
    node_health_reason: str
    faults: list[GpuFault]
    """The newest first, at most ``MAX_FAULTS``."""
    fault_counts: dict[str, dict[str, int]]
    """``{"24h": {kind: n}, "7d": {kind: n}}``; an XID counts as ``xid <code>``."""
    serial_pulls: list[GpuPull]
    serial_seen_on: list[str]
    """Node ids whose info or telemetry lists this GPU's UUID or serial now."""


class HeartbeatInfo(_Reply, frozen=True, kw_only=True):
    boot_id: str
    seq: int
    agent_sent_at: float
    gpu_count: int | None
    running_allocs: int | None
    reattaching: bool
    fingerprint: str | None
    interval: float | None = None


class NodeDescription(NodeDetail, frozen=True, kw_only=True):
    """``node.describe``: the node, its last heartbeat and its last resource report;
    the heartbeat interval its agent reports against the node's heartbeat timeout, and
    why that interval cannot keep it READY (``events.liveness.interval_warning``)."""

    heartbeat: HeartbeatInfo | None
    resources: dict[str, Any] | None
    heartbeat_interval: float | None = None
    heartbeat_timeout: float | None = None
    heartbeat_warning: str | None = None
    agent: str | None = None
    """The agent process that announced the node's current boot: host, pid, since when."""
    agent_conflict: str | None = None
    """Set while two agents heartbeat for this node id (one must be stopped)."""
    gpu_health: list[GpuSummary] = []
    """Every GPU of the node with its health, cause and main readings (``gpu.list``)."""
    validation_failures: int = 0
    """Its failed validations within ``validation.window`` (now less the window): the
    ``validation.quarantine_after``-th quarantines it."""
    validation_window_s: float | None = None
    validation_waiting: bool = False
    """Due for a validation the gate runs (``validation.when``) and able to run it, but not
    started yet: it waits for a free slot (``validation.max_concurrent``). The scheduler
    places nothing on it meanwhile."""


class CommandResult(_Reply, frozen=True, kw_only=True):
    """A node command: the event it appended and the node once the view holds it; or,
    where the command's goal already held, nothing appended (``event``, ``event_id``
    empty, ``seq`` the node's version) and ``unchanged`` saying so with the state."""

    event: str
    event_id: str
    seq: int
    node: NodeDetail | None
    unchanged: str = ""
    """E.g. ``node gpu-1 already cordoned (state CORDONED)``: a success, exit 0."""
