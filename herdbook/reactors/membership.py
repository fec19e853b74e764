"""Membership deciders (Bacalhau): approve, reject, delete, auto-approve. Pure. Approving
an approved node or rejecting a rejected one is ``AlreadyDone`` (a success, nothing
appended); delete is not idempotent (a node not in the view is not_found)."""

from __future__ import annotations

from herdbook.events.node import NodeApproved, NodeDeleted, NodeEvent, NodeRejected
from herdbook.events.states import Approval, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.reactors.refused import AlreadyDone, CommandRefused


def decide_approve(view: NodeView, actor: str, reason: str = "") -> NodeEvent:
    if view.approval is Approval.APPROVED:
        raise AlreadyDone(f"node {view.id} already approved")
    return NodeApproved(node_id=view.id, actor=actor, reason=reason)


def decide_reject(view: NodeView, actor: str, reason: str = "") -> NodeEvent:
    if view.approval is Approval.REJECTED:
        raise AlreadyDone(f"node {view.id} already rejected")
    if view.type is NodeType.REQUESTER:
        raise CommandRefused(f"node {view.id} is a requester (control-plane) node and cannot be "
                             "rejected")
    return NodeRejected(node_id=view.id, actor=actor, reason=reason)


def decide_delete(view: NodeView, actor: str, reason: str = "") -> NodeEvent:
    return NodeDeleted(node_id=view.id, actor=actor, reason=reason)


AUTO_APPROVE_ACTOR = "auto-approve"


def decide_auto_approve(view: NodeView, auto_approve: bool) -> list[NodeEvent]:
    """With ``approval.auto_approve`` a PENDING node is approved as soon as it registers."""
    if auto_approve and view.approval is Approval.PENDING:
        return [NodeApproved(node_id=view.id, actor=AUTO_APPROVE_ACTOR,
                             reason="approval.auto_approve is on")]
    return []
