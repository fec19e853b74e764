"""Node dimensions and the one-word derived state (DESIGN §4)."""

from __future__ import annotations

from enum import StrEnum


class Approval(StrEnum):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


class Lifecycle(StrEnum):
    UNKNOWN = "UNKNOWN"
    BOOTING = "BOOTING"
    READY = "READY"
    DEGRADED = "DEGRADED"
    DOWN = "DOWN"
    FAILED = "FAILED"
    QUARANTINED = "QUARANTINED"
    TERMINATED = "TERMINATED"


class Health(StrEnum):
    UNKNOWN = "UNKNOWN"
    HEALTHY = "HEALTHY"
    DEGRADED = "DEGRADED"
    UNHEALTHY = "UNHEALTHY"


class Intent(StrEnum):
    ELIGIBLE = "ELIGIBLE"
    CORDONED = "CORDONED"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    DISABLED = "DISABLED"


class NodeType(StrEnum):
    COMPUTE = "compute"
    REQUESTER = "requester"


class NodeClass(StrEnum):
    STANDARD = "standard"
    SENSITIVE = "sensitive"
    BORROWED = "borrowed"


# The one word `herd node list` shows: first match wins (DESIGN §4).
STATE_ORDER: tuple[str, ...] = (
    "TERMINATED", "QUARANTINED", "FAILED", "DOWN", "UNKNOWN", "BOOTING", "DEGRADED",
    "UNHEALTHY", "VALIDATING", "DISABLED", "DRAINING", "DRAINED", "CORDONED", "READY",
)

# Words of the source systems, accepted by `--filter-state`.
STATE_ALIASES: dict[str, frozenset[str]] = {
    "ACTIVE": frozenset({"READY"}),
    "CONNECTED": frozenset({"READY"}),
    "HEALTHY": frozenset({"READY"}),
    "DISCONNECTED": frozenset({"DEGRADED", "DOWN"}),
    "UNHEALTHY": frozenset({"UNHEALTHY"}),
}


def derive_state(lifecycle: Lifecycle, health: Health, intent: Intent,
                 validating: bool = False) -> str:
    """``validating``: the node's validation check runs (docs/remediation.md#validation)."""
    if lifecycle in (Lifecycle.TERMINATED, Lifecycle.QUARANTINED, Lifecycle.FAILED,
                     Lifecycle.DOWN, Lifecycle.UNKNOWN, Lifecycle.BOOTING, Lifecycle.DEGRADED):
        return lifecycle.value
    if health is Health.UNHEALTHY:
        return "UNHEALTHY"
    if validating:
        return "VALIDATING"
    if intent is not Intent.ELIGIBLE:
        return intent.value
    return "READY"


def is_schedulable(approval: Approval, lifecycle: Lifecycle, health: Health,
                   intent: Intent, validating: bool = False) -> bool:
    return (approval is Approval.APPROVED and lifecycle is Lifecycle.READY
            and health is not Health.UNHEALTHY and intent is Intent.ELIGIBLE
            and not validating)


def resolve_state_filter(words: list[str]) -> frozenset[str]:
    """Map user words (states or aliases, any case) to states; raise ValueError on others."""
    wanted: set[str] = set()
    for word in words:
        upper = word.strip().upper()
        if upper in STATE_ALIASES:
            wanted |= STATE_ALIASES[upper]
        elif upper in STATE_ORDER:
            wanted.add(upper)
        else:
            choices = ", ".join([s.lower() for s in STATE_ORDER] + [a.lower() for a in STATE_ALIASES])
            raise ValueError(f"unknown state {word!r}; choose from {choices}")
    return frozenset(wanted)


class InstanceState(StrEnum):
    PROVISIONING = "PROVISIONING"
    PENDING_REGISTRATION = "PENDING_REGISTRATION"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED = "FAILED"
