"""Node membership and liveness events (aggregate ``node``)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import msgspec

from herdbook.events.base import Event
from herdbook.events.heartbeat import AgentId
from herdbook.events.states import NodeClass, NodeType


class GpuInfo(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    uuid: str
    name: str
    memory_bytes: int = 0
    driver_version: str = ""


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a node says about itself; persisted (Bacalhau's Node Info Store)."""

    hostname: str = ""
    arch: str = ""
    os: str = ""
    cpus: int = 0
    memory_bytes: int = 0
    gpus: tuple[GpuInfo, ...] = ()
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_class: NodeClass = NodeClass.STANDARD
    agent_version: str = ""
    instance_id: str | None = None


class NodeEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "node"

    node_id: str
    prev_hash: str | None = None
    """SHA-256 of the node's previous event as stored (its JSON bytes): the audit
    chain, set by ``EventStore.append`` on every node event; ``herd audit verify``
    checks it."""

    @property
    def aggregate_id(self) -> str:
        return self.node_id


# membership
class NodeRegistered(NodeEvent, frozen=True, kw_only=True, tag="node.registered"):
    """The agent's first announcement. Registering a node the view already holds (a new
    state dir, a replacement machine) keeps the node's labels: the registration's own
    labels are added over them, none is dropped (``projector/node_fold.py``)."""

    node_type: NodeType = NodeType.COMPUTE
    boot_id: str = ""
    info: NodeInfo = NodeInfo()
    agent: AgentId | None = None
    """The agent process that registered (host, pid, start)."""


class NodeInfoUpdated(NodeEvent, frozen=True, kw_only=True, tag="node.info_updated"):
    info: NodeInfo


class NodeApproved(NodeEvent, frozen=True, kw_only=True, tag="node.approved"):
    reason: str = ""


class NodeRejected(NodeEvent, frozen=True, kw_only=True, tag="node.rejected"):
    reason: str = ""


class NodeDeleted(NodeEvent, frozen=True, kw_only=True, tag="node.deleted"):
    reason: str = ""


# liveness
class NodeDegraded(NodeEvent, frozen=True, kw_only=True, tag="node.degraded"):
    """No heartbeat for ``heartbeat_timeout``; ages are on the control plane's clock."""

    heartbeat_age: float
    reason: str = ""
    boot_id: str = ""
    """The boot of the last heartbeat seen, so a later heartbeat can tell a healed
    partition (same boot) from a restarted agent (new boot)."""


class NodeRecovered(NodeEvent, frozen=True, kw_only=True, tag="node.recovered"):
    reason: str = ""
    boot_id: str = ""


class NodeDown(NodeEvent, frozen=True, kw_only=True, tag="node.down"):
    heartbeat_age: float | None = None
    reason: str = ""
    boot_id: str = ""


# boot
class NodeDeclared(NodeEvent, frozen=True, kw_only=True, tag="node.declared"):
    """`herd node add`: the node is expected but has never reported (UNKNOWN)."""

    reason: str = ""
    node_class: NodeClass = NodeClass.STANDARD
    labels: dict[str, str] = msgspec.field(default_factory=dict)


class NodeBootStarted(NodeEvent, frozen=True, kw_only=True, tag="node.boot_started"):
    """The agent started (``trigger`` agent_started) or a reboot was requested (reboot)."""

    trigger: str = "agent_started"
    boot_id: str = ""
    reason: str = ""
    agent: AgentId | None = None
    """The agent process that started (trigger agent_started)."""


class NodeBootChecked(NodeEvent, frozen=True, kw_only=True, tag="node.boot_checked"):
    """The agent's one-time boot check: every check by name, "ok" or what failed."""

    boot_id: str = ""
    passed: bool
    checks: dict[str, str] = msgspec.field(default_factory=dict)


class NodeFailed(NodeEvent, frozen=True, kw_only=True, tag="node.failed"):
    reason: str = ""


# operator intents
class NodeCordoned(NodeEvent, frozen=True, kw_only=True, tag="node.cordoned"):
    reason: str = ""


class NodeUncordoned(NodeEvent, frozen=True, kw_only=True, tag="node.uncordoned"):
    """Also clears a sticky UNHEALTHY after an operator checked the hardware."""

    reason: str = ""


class NodeDrainStarted(NodeEvent, frozen=True, kw_only=True, tag="node.drain_started"):
    reason: str = ""
    urgent: bool = False
    deadline_s: float | None = None


class NodeDrained(NodeEvent, frozen=True, kw_only=True, tag="node.drained"):
    reason: str = ""


class NodeUndrained(NodeEvent, frozen=True, kw_only=True, tag="node.undrained"):
    reason: str = ""


class NodeDisabled(NodeEvent, frozen=True, kw_only=True, tag="node.disabled"):
    reason: str = ""


class NodeEnabled(NodeEvent, frozen=True, kw_only=True, tag="node.enabled"):
    reason: str = ""
    forced: bool = False


class NodeTerminated(NodeEvent, frozen=True, kw_only=True, tag="node.terminated"):
    """Its instance was terminated: terminal, the record stays."""

    instance_id: str = ""
    reason: str = ""


class NodeNotificationFailed(NodeEvent, frozen=True, kw_only=True,
                             tag="node.notification_failed"):
    """Telling the workload system about ``action`` failed after every retry."""

    action: str
    reason: str
    attempts: int = 1


# sensitive nodes (Lattice): claim, release, wipe, conformance
class NodeClaimed(NodeEvent, frozen=True, kw_only=True, tag="node.claimed"):
    """A user claims a sensitive node explicitly; the first append wins."""

    user: str
    tenant: str = ""
    reason: str = ""


class NodeReleased(NodeEvent, frozen=True, kw_only=True, tag="node.released"):
    """The claim ends: the node drains (other sensitive allocations run) or is wiped."""

    user: str = ""
    reason: str = ""


class NodeWipeStarted(NodeEvent, frozen=True, kw_only=True, tag="node.wipe_started"):
    """The agent runs its wipe steps; the node is BOOTING (not schedulable) meanwhile."""

    attempt: int = 1
    forced: bool = False
    timeout_s: float = 1800.0
    reason: str = ""


class NodeWipeStepReported(NodeEvent, frozen=True, kw_only=True, tag="node.wipe_step"):
    step: str
    ok: bool
    detail: str = ""


class NodeWiped(NodeEvent, frozen=True, kw_only=True, tag="node.wiped"):
    """Every wipe step confirmed: READY and back in the pool, unclaimed."""

    steps: list[str] = msgspec.field(default_factory=list)


class NodeWipeFailed(NodeEvent, frozen=True, kw_only=True, tag="node.wipe_failed"):
    """A step failed or ``sensitive.wipe_timeout`` passed: QUARANTINED."""

    reason: str
    step: str = ""


class NodeConformanceChanged(NodeEvent, frozen=True, kw_only=True,
                             tag="node.conformance_changed"):
    """The node's conformance fingerprint, its group's expected one, and whether it
    drifted (differs from the pool's configured fingerprint, or else its majority)."""

    fingerprint: str
    expected: str = ""
    drift: bool = False
    reason: str = ""


# the validation gate (docs/remediation.md#validation): a check proves a node before it
# is back in service. The check runs as an allocation (``alloc_id``) of the pseudo job
# ``node-validation`` on that node, holding all its GPUs; ``trigger`` says why it ran.
class NodeValidationStarted(NodeEvent, frozen=True, kw_only=True,
                            tag="node.validation_started"):
    """The node is VALIDATING (not schedulable, not counted healthy) until
    ``node.validated`` or ``node.validation_failed`` of the same ``alloc_id``."""

    trigger: str
    """returned (from DOWN, FAILED or UNHEALTHY: a new boot, an uncordon, an enable),
    approved (its first approval), or operator (``herd node validate``)."""
    check: str
    """The check's name (config ``validation.name``)."""
    command: list[str]
    timeout_s: float
    alloc_id: str
    """The allocation that runs the check, chosen here so that a new leader places the
    same one."""
    reason: str = ""


class NodeValidationDue(NodeEvent, frozen=True, kw_only=True, tag="node.validation_due"):
    """The node must pass the validation gate's check, for ``trigger``, before it is back
    in service: a replacement instance's node stands for the node it replaces, so it is
    ``returned`` (not ``approved``) from its registration on."""

    trigger: str
    reason: str = ""
    """E.g. ``replaces gpu-7``."""


class NodeValidated(NodeEvent, frozen=True, kw_only=True, tag="node.validated"):
    """The check exited 0: back in service."""

    alloc_id: str
    check: str = ""
    trigger: str = ""
    started_at: datetime | None = None
    """When its ``node.validation_started`` was appended."""
    duration_s: float = 0.0
    output: str = ""
    """The tail of the check's output (at most 2 KiB)."""


class NodeValidationFailed(NodeEvent, frozen=True, kw_only=True,
                           tag="node.validation_failed"):
    """The check failed (exit != 0, could not start, lost, timed out): UNHEALTHY, with
    ``reason`` as the health reason; QUARANTINED as well when ``quarantine``."""

    alloc_id: str
    reason: str
    """One line: the check, how it ended, the last line of its output."""
    check: str = ""
    trigger: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    duration_s: float = 0.0
    output: str = ""
    """The tail of the check's output (at most 2 KiB)."""
    failures: int = 1
    """Validation failures of this node within ``validation.window``, this one included."""
    quarantine: bool = False
    """``failures`` reached ``validation.quarantine_after`` and the circuit breaker let
    it: QUARANTINED (held instead: a ``node.action_held`` of kind quarantine follows)."""
    recommended_action: str | None = None
    """What to do (``health.actions``: ``inspect_hardware`` for a failed validation); the
    node's ``recommended_action`` from here on. None on events written before it."""
