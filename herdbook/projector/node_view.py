"""The node view and its pure fold: ``apply(view, event, seq) -> view``.

A view is ``None`` until the node registers and again after ``node.deleted``.
``version`` is the stream sequence of the node's last event: the expected version
for the next optimistic-concurrency append.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec.structs import replace

from herdbook.events.codec import AnyEvent
from herdbook.events.node import (
    NodeApproved,
    NodeDegraded,
    NodeDeleted,
    NodeDown,
    NodeInfo,
    NodeInfoUpdated,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
)
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
    last_event: str = ""
    version: int = 0

    @property
    def state(self) -> str:
        return derive_state(self.lifecycle, self.health, self.intent)

    @property
    def schedulable(self) -> bool:
        return is_schedulable(self.approval, self.lifecycle, self.health, self.intent)


def apply(view: NodeView | None, event: AnyEvent, seq: int) -> NodeView | None:
    """Fold one node event. Unknown nodes ignore every event but registration."""
    match event:
        case NodeRegistered():
            return _registered(view, event, seq)
        case NodeDeleted():
            return None
    if view is None:
        return None
    view = replace(view, version=seq, updated_at=event.at, last_event=event.event_name)
    match event:
        case NodeInfoUpdated(info=info):
            return replace(view, info=info)
        case NodeApproved(reason=reason):
            return replace(view, approval=Approval.APPROVED, approval_reason=reason,
                           approval_actor=event.actor, approval_at=event.at)
        case NodeRejected(reason=reason):
            return replace(view, approval=Approval.REJECTED, approval_reason=reason,
                           approval_actor=event.actor, approval_at=event.at)
        case NodeDegraded(reason=reason, boot_id=boot_id):
            return _lifecycle(view, Lifecycle.DEGRADED, reason, event.at, boot_id)
        case NodeRecovered(reason=reason, boot_id=boot_id):
            return _lifecycle(view, Lifecycle.READY, reason, event.at, boot_id)
        case NodeDown(reason=reason, boot_id=boot_id):
            return _lifecycle(view, Lifecycle.DOWN, reason, event.at, boot_id)
    return view


def _lifecycle(view: NodeView, lifecycle: Lifecycle, reason: str, at: datetime,
               boot_id: str) -> NodeView:
    return replace(view, lifecycle=lifecycle, lifecycle_reason=reason, lifecycle_at=at,
                   boot_id=boot_id or view.boot_id)


def _registered(view: NodeView | None, event: NodeRegistered, seq: int) -> NodeView:
    if view is None:
        approval = (Approval.APPROVED if event.node_type is NodeType.REQUESTER
                    else Approval.PENDING)
        return NodeView(
            id=event.node_id, type=event.node_type, approval=approval,
            lifecycle=Lifecycle.READY, info=event.info, boot_id=event.boot_id,
            registered_at=event.at, updated_at=event.at, lifecycle_at=event.at,
            lifecycle_reason="registered", last_event=event.event_name, version=seq,
        )
    # Registering again keeps the approval decision: a REJECTED node stays REJECTED.
    return replace(view, type=event.node_type, info=event.info, boot_id=event.boot_id,
                   lifecycle=Lifecycle.READY, lifecycle_reason="registered again",
                   lifecycle_at=event.at, updated_at=event.at,
                   last_event=event.event_name, version=seq)


def apply_all(views: dict[str, NodeView], events: list[tuple[int, AnyEvent]]) -> set[str]:
    """Fold a batch into ``views`` in place; return the ids that changed."""
    changed: set[str] = set()
    for seq, event in events:
        node_id = event.node_id
        new = apply(views.get(node_id), event, seq)
        if new is None:
            views.pop(node_id, None)
        else:
            views[node_id] = new
        changed.add(node_id)
    return changed
