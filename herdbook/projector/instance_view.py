"""The instance view and its pure fold."""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec.structs import replace

from herdbook.events.instance import (
    InstanceEvent,
    InstanceFailed,
    InstanceProviderError,
    InstanceProvisioned,
    InstanceProvisioning,
    InstanceRunning,
    InstanceTerminated,
    InstanceTerminating,
)
from herdbook.events.states import InstanceState, NodeClass


class InstanceView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    pool: str
    provider: str
    node_id: str
    state: InstanceState
    node_class: NodeClass = NodeClass.STANDARD
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    provider_ref: str = ""
    replaces: str | None = None
    reason: str = ""
    errors: tuple[str, ...] = ()
    created_at: datetime | None = None
    updated_at: datetime | None = None
    state_at: datetime | None = None
    version: int = 0


def apply_instance(view: InstanceView | None, event: InstanceEvent,
                   seq: int) -> InstanceView | None:
    if isinstance(event, InstanceProvisioning):
        return InstanceView(
            id=event.instance_id, pool=event.pool, provider=event.provider,
            node_id=event.node_id, state=InstanceState.PROVISIONING,
            node_class=event.node_class, labels=dict(event.labels), replaces=event.replaces,
            reason=event.reason, created_at=event.at, updated_at=event.at, state_at=event.at,
            version=seq)
    if view is None:
        return None
    view = replace(view, updated_at=event.at, version=seq)
    match event:
        case InstanceProvisioned(provider_ref=ref):
            return _state(replace(view, provider_ref=ref), InstanceState.PENDING_REGISTRATION,
                          event, "provisioned")
        case InstanceRunning():
            return _state(view, InstanceState.RUNNING, event, "agent registered")
        case InstanceFailed(reason=reason):
            return _state(view, InstanceState.FAILED, event, reason)
        case InstanceTerminating(reason=reason):
            return _state(view, InstanceState.TERMINATING, event, reason)
        case InstanceTerminated(reason=reason):
            return _state(view, InstanceState.TERMINATED, event, reason or "terminated")
        case InstanceProviderError(operation=operation, reason=reason):
            return replace(view, errors=(*view.errors[-9:], f"{operation}: {reason}"))
    return view


def _state(view: InstanceView, state: InstanceState, event: InstanceEvent,
           reason: str) -> InstanceView:
    return replace(view, state=state, state_at=event.at, reason=reason)
