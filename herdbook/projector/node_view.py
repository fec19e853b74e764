"""The node view: what the read model holds of one node (``NodeView``), folded from its
events by ``projector.node_fold.apply``.

A view is ``None`` until the node registers and again after ``node.deleted``.
``version`` is the stream sequence of the node's last event: the expected version
for the next optimistic-concurrency append.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from herdbook.events.health_report import GpuVerdict
from herdbook.events.heartbeat import AgentId
from herdbook.events.node import NodeInfo
from herdbook.events.states import (
    Approval,
    Health,
    Intent,
    Lifecycle,
    NodeType,
    derive_state,
    is_schedulable,
)


class NodeView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    type: NodeType
    approval: Approval
    lifecycle: Lifecycle
    health: Health = Health.UNKNOWN
    intent: Intent = Intent.ELIGIBLE
    info: NodeInfo = NodeInfo()
    boot_id: str = ""
    registered_at: datetime | None = None
    updated_at: datetime | None = None
    approval_reason: str = ""
    approval_actor: str = ""
    approval_at: datetime | None = None
    lifecycle_reason: str = ""
    lifecycle_at: datetime | None = None
    boot_failures: int = 0
    boot_checks: dict[str, str] = msgspec.field(default_factory=dict)
    intent_reason: str = ""
    intent_actor: str = ""
    intent_at: datetime | None = None
    health_reason: str = ""
    health_level: str = ""
    """The level of the verdict that set ``health`` (``node.health_changed``'s ``level``:
    healthy ... fatal); empty where the event did not record one."""
    health_action: str = ""
    """What to do about that verdict (``node.health_changed``'s ``recommended_action``);
    empty where the event did not record one, or once an operator cleared it."""
    notification_error: str = ""
    health_at: datetime | None = None
    drain_urgent: bool = False
    drain_deadline: datetime | None = None
    last_event: str = ""
    claimed_by: str | None = None
    tenant: str = ""
    claimed_at: datetime | None = None
    release_pending: bool = False
    """Released while other sensitive allocations ran: wiped once DRAINED."""
    wipe_status: str = ""                 # "" | wiping | wiped | failed
    wipe_attempt: int = 0
    wipe_steps: dict[str, str] = msgspec.field(default_factory=dict)
    wipe_started_at: datetime | None = None
    wipe_timeout_s: float = 0.0
    fingerprint: str = ""
    fingerprint_expected: str = ""
    drift: bool = False
    held: str = ""
    """The kind of the last automatic action the circuit breaker held (``node.action_held``)."""
    held_at: datetime | None = None
    agent: AgentId | None = None
    """The agent process that announced the node's current boot (host, pid, start)."""
    gpus: dict[int, GpuVerdict] = msgspec.field(default_factory=dict)
    """Per GPU index, its verdict and cause where not healthy (``node.health_changed``'s
    ``gpus``, ``reactors/gpu_health.py``); emptied by an operator's uncordon or enable."""
    validation: str = ""
    """The node's last validation (docs/remediation.md#validation): "" (none), running
    (the node is VALIDATING), passed, failed, or interrupted (the node went DOWN meanwhile)."""
    validation_due: str = ""
    """Why the node must be validated before it is back in service ("" if it need not):
    returned (it was DOWN, FAILED or UNHEALTHY) or approved (its first approval). The
    validation reactor acts on it once the node is READY again; kept when validation is
    not configured."""
    validation_trigger: str = ""
    validation_check: str = ""
    validation_alloc: str = ""
    validation_command: tuple[str, ...] = ()
    validation_started_at: datetime | None = None
    validation_timeout_s: float = 0.0
    validation_at: datetime | None = None
    """When the last validation ended."""
    validation_reason: str = ""
    """How the last validation ended, in one line."""
    validation_failures: tuple[datetime, ...] = ()
    """When its last validations failed (at most ``node_fold.MAX_VALIDATION_FAILURES``)."""
    version: int = 0

    @property
    def state(self) -> str:
        return derive_state(self.lifecycle, self.health, self.intent,
                            self.validation == "running")

    @property
    def schedulable(self) -> bool:
        return is_schedulable(self.approval, self.lifecycle, self.health, self.intent,
                              self.validation == "running")
