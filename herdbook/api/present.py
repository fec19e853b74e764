"""Views as the stable JSON objects of the API (DESIGN §7)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


def node_json(view: NodeView, heartbeat_age: float | None, heartbeat_timeout: float, *,
              wide: bool = True, allocations: int = 0) -> dict[str, Any]:
    """``heartbeating``: a heartbeat arrived within the node's heartbeat_timeout (so a DOWN
    node whose partition healed shows as DOWN but heartbeating)."""
    info = view.info
    last_hb = None
    if heartbeat_age is not None:
        last_hb = iso(datetime.fromtimestamp(time.time() - heartbeat_age, UTC))
    out: dict[str, Any] = {
        "id": view.id,
        "type": view.type.value,
        "class": info.node_class.value,
        "approval": view.approval.value,
        "lifecycle": view.lifecycle.value,
        "health": view.health.value,
        "intent": view.intent.value,
        "state": view.state,
        "schedulable": view.schedulable,
        "labels": dict(info.labels),
        "pool": info.labels.get("pool"),
        "last_heartbeat": last_hb,
        "heartbeat_age": None if heartbeat_age is None else round(heartbeat_age, 3),
        "heartbeating": heartbeat_age is not None and heartbeat_age < heartbeat_timeout,
        "allocations": allocations,
        "gpus": len(info.gpus),
        "fingerprint_group": (view.fingerprint[:12] + (" DRIFT" if view.drift else ""))
        if view.fingerprint else None,
        "claimed_by": view.claimed_by,
    }
    if wide:
        out.update({
            "hostname": info.hostname,
            "arch": info.arch,
            "os": info.os,
            "cpus": info.cpus,
            "memory_bytes": info.memory_bytes,
            "gpu_devices": [{"index": g.index, "uuid": g.uuid, "name": g.name,
                             "memory_bytes": g.memory_bytes} for g in info.gpus],
            "agent_version": info.agent_version,
            "instance_id": info.instance_id,
            "boot_id": view.boot_id,
            "registered_at": iso(view.registered_at),
            "updated_at": iso(view.updated_at),
            "approval_reason": view.approval_reason,
            "approval_actor": view.approval_actor,
            "approval_at": iso(view.approval_at),
            "lifecycle_reason": view.lifecycle_reason,
            "lifecycle_at": iso(view.lifecycle_at),
            "intent_reason": view.intent_reason,
            "intent_actor": view.intent_actor,
            "intent_at": iso(view.intent_at),
            "drain_urgent": view.drain_urgent,
            "drain_deadline": iso(view.drain_deadline),
            "boot_failures": view.boot_failures,
            "health_reason": view.health_reason,
            "notification_error": view.notification_error,
            "boot_checks": dict(view.boot_checks),
            "last_event": view.last_event,
            "fingerprint": view.fingerprint or None,
            "fingerprint_expected": view.fingerprint_expected or None,
            "drift": view.drift,
            "tenant": view.tenant or None,
            "claimed_at": iso(view.claimed_at),
            "wipe_status": view.wipe_status or None,
            "wipe_attempt": view.wipe_attempt,
            "wipe_steps": dict(view.wipe_steps),
            "version": view.version,
        })
    return out


def instance_json(inst: InstanceView) -> dict[str, Any]:
    return {"id": inst.id, "pool": inst.pool, "provider": inst.provider,
            "node_id": inst.node_id, "state": inst.state.value, "class": inst.node_class.value,
            "provider_ref": inst.provider_ref, "replaces": inst.replaces,
            "reason": inst.reason, "errors": list(inst.errors),
            "created_at": iso(inst.created_at), "state_at": iso(inst.state_at)}


def eval_json(view: EvalView) -> dict[str, Any]:
    return {"id": view.id, "job_id": view.job_id, "status": view.status.value,
            "triggered_by": view.triggered_by.value, "previous_eval": view.previous_eval,
            "next_eval": view.next_eval, "blocked_eval": view.blocked_eval,
            "priority": view.priority, "node_id": view.node_id,
            "wait_until": iso(view.wait_until), "status_reason": view.status_reason,
            "created_at": iso(view.created_at), "modified_at": iso(view.modified_at)}


def alloc_json(alloc: AllocView) -> dict[str, Any]:
    return {"id": alloc.id, "job_id": alloc.job_id, "node_id": alloc.node_id,
            "index": alloc.index, "status": alloc.status.value, "desired": alloc.desired,
            "exit_code": alloc.exit_code, "requeue_count": alloc.requeue_count,
            "requeue_allowed": alloc.requeue_allowed, "previous_alloc": alloc.previous_alloc,
            "migrate": alloc.migrate, "eval_id": alloc.eval_id, "pid": alloc.pid,
            "reattached": alloc.reattached, "status_reason": alloc.status_reason,
            "resources": {"cpu": alloc.resources.cpu, "memory_mb": alloc.resources.memory_mb,
                          "gpus": alloc.resources.gpus},
            "command": list(alloc.command), "job_version": alloc.job_version,
            "created_at": iso(alloc.created_at), "started_at": iso(alloc.started_at),
            "finished_at": iso(alloc.finished_at), "modified_at": iso(alloc.modified_at)}
