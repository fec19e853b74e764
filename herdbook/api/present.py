"""Views as the API's reply Structs (DESIGN §7): pure, no I/O.

``node_json`` and ``instance_json`` are the same replies as plain dicts, for the
readers that merge them into a larger object (time travel, the simulator's checks);
``NodeJsonCache`` the node replies as JSON bytes, built once per view version
(``node.list``).

What a node says about itself (hostname, labels, GPUs, boot checks, wipe steps) and the
reasons on its events are stored as they came: an agent may send a megabyte of them. A
reply carries them bounded, so that one node's reply stays far below NATS's 1 MB
max_payload (which would otherwise cut it, and `herd node describe` and `herd node list`
fail to decode for the whole fleet): a text over ``MAX_TEXT`` characters is cut and
ends in ``... (N chars)``, a label key over ``MAX_LABEL_KEY`` likewise; at most
``MAX_ENTRIES`` labels, boot checks or wipe steps and ``MAX_GPUS`` GPUs are shown, the
rest counted under the key ``...`` (or, for GPUs, by ``gpus``, which counts them all).
The event log keeps them whole (``herd events tail -o json``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec

from herdbook.api.messages import (
    AllocReply,
    EvalReply,
    GpuDevice,
    InstanceReply,
    NodeDetail,
    NodeSummary,
)
from herdbook.clock import Clock
from herdbook.history.times import iso
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.text import clip

MAX_TEXT = 4096
"""The most characters of one text field a reply carries (the rest is counted)."""
MAX_LABEL_KEY = 256
MAX_ENTRIES = 128
"""The most labels, boot checks or wipe steps one node's reply carries."""
MAX_GPUS = 256
OMITTED_KEY = "..."
"""The key that counts the entries of a map a reply left out."""


def shown(text: str | None) -> str | None:
    """``text`` as a reply carries it: at most ``MAX_TEXT`` characters, its length said."""
    return None if text is None else clip(text, MAX_TEXT)


def shown_map(entries: dict[str, str]) -> dict[str, str]:
    """A map of an agent's (labels, boot checks, wipe steps) as a reply carries it."""
    if len(entries) <= MAX_ENTRIES and all(
            len(k) <= MAX_LABEL_KEY and len(v) <= MAX_TEXT for k, v in entries.items()):
        return dict(entries)
    out = {clip(k, MAX_LABEL_KEY): clip(v, MAX_TEXT)
           for k, v in list(entries.items())[:MAX_ENTRIES]}
    if len(entries) > MAX_ENTRIES:
        out[OMITTED_KEY] = f"{len(entries) - MAX_ENTRIES} more not shown"
    return out


def _summary_fields(view: NodeView, heartbeat_age: float | None, heartbeat_timeout: float,
                    allocations: int, clock: Clock | None) -> dict[str, Any]:
    """``last_heartbeat``: the clock's now less the heartbeat's age (no heartbeat, no
    time: then no clock is read, and None may stand for it)."""
    info = view.info
    last_hb = None
    if heartbeat_age is not None:
        if clock is None:
            raise ValueError("a heartbeat's time needs the clock")
        last_hb = iso(datetime.fromtimestamp(clock.now().timestamp() - heartbeat_age, UTC))
    return {
        "id": view.id, "type": view.type, "node_class": info.node_class,
        "approval": view.approval, "lifecycle": view.lifecycle, "health": view.health,
        "intent": view.intent, "state": view.state, "schedulable": view.schedulable,
        "labels": shown_map(info.labels), "pool": shown(info.labels.get("pool")),
        "last_heartbeat": last_hb,
        "heartbeat_age": None if heartbeat_age is None else round(heartbeat_age, 3),
        "heartbeating": heartbeat_age is not None and heartbeat_age < heartbeat_timeout,
        "allocations": allocations, "gpus": len(info.gpus),
        "fingerprint_group": (view.fingerprint[:12] + (" DRIFT" if view.drift else ""))
        if view.fingerprint else None,
        "claimed_by": shown(view.claimed_by),
    }


def _detail_fields(view: NodeView) -> dict[str, Any]:
    info = view.info
    text = shown
    return {
        "hostname": text(info.hostname), "arch": text(info.arch), "os": text(info.os),
        "cpus": info.cpus, "memory_bytes": info.memory_bytes,
        "gpu_devices": [GpuDevice(index=g.index, uuid=clip(g.uuid, MAX_LABEL_KEY),
                                  name=clip(g.name, MAX_LABEL_KEY),
                                  memory_bytes=g.memory_bytes) for g in info.gpus[:MAX_GPUS]],
        "agent_version": text(info.agent_version), "instance_id": text(info.instance_id),
        "boot_id": text(view.boot_id), "registered_at": iso(view.registered_at),
        "updated_at": iso(view.updated_at), "approval_reason": text(view.approval_reason),
        "approval_actor": text(view.approval_actor), "approval_at": iso(view.approval_at),
        "lifecycle_reason": text(view.lifecycle_reason),
        "lifecycle_at": iso(view.lifecycle_at),
        "intent_reason": text(view.intent_reason), "intent_actor": text(view.intent_actor),
        "intent_at": iso(view.intent_at), "drain_urgent": view.drain_urgent,
        "drain_deadline": iso(view.drain_deadline), "boot_failures": view.boot_failures,
        "health_reason": text(view.health_reason),
        "notification_error": text(view.notification_error),
        "boot_checks": shown_map(view.boot_checks), "last_event": view.last_event,
        "fingerprint": text(view.fingerprint) or None,
        "fingerprint_expected": text(view.fingerprint_expected) or None, "drift": view.drift,
        "tenant": text(view.tenant) or None, "claimed_at": iso(view.claimed_at),
        "wipe_status": view.wipe_status or None, "wipe_attempt": view.wipe_attempt,
        "wipe_steps": shown_map(view.wipe_steps), "version": view.version,
        "recommended_action": view.health_action or None,
        "validation": view.validation or None, "validation_due": view.validation_due or None,
        "validation_trigger": view.validation_trigger or None,
        "validation_check": text(view.validation_check) or None,
        "validation_alloc": view.validation_alloc or None,
        "validation_started_at": iso(view.validation_started_at),
        "validation_at": iso(view.validation_at),
        "validation_reason": text(view.validation_reason) or None,
    }


def node_summary(view: NodeView, heartbeat_age: float | None, heartbeat_timeout: float, *,
                 clock: Clock | None, allocations: int = 0) -> NodeSummary:
    """``clock``: the server's, for ``last_heartbeat`` (None: no heartbeat age given)."""
    return NodeSummary(**_summary_fields(view, heartbeat_age, heartbeat_timeout, allocations,
                                         clock))


def node_detail(view: NodeView, heartbeat_age: float | None, heartbeat_timeout: float, *,
                clock: Clock | None, allocations: int = 0) -> NodeDetail:
    return NodeDetail(**_summary_fields(view, heartbeat_age, heartbeat_timeout, allocations,
                                        clock),
                      **_detail_fields(view))


def node_json(view: NodeView, heartbeat_age: float | None, heartbeat_timeout: float, *,
              clock: Clock | None, wide: bool = True, allocations: int = 0) -> dict[str, Any]:
    """``node_detail`` (``wide``) or ``node_summary`` as a plain dict."""
    build = node_detail if wide else node_summary
    out: dict[str, Any] = msgspec.to_builtins(
        build(view, heartbeat_age, heartbeat_timeout, allocations=allocations, clock=clock))
    return out


def instance_reply(inst: InstanceView) -> InstanceReply:
    return InstanceReply(
        id=inst.id, pool=inst.pool, provider=inst.provider, node_id=inst.node_id,
        state=inst.state.value, node_class=inst.node_class, provider_ref=inst.provider_ref,
        replaces=inst.replaces, reason=inst.reason, errors=list(inst.errors),
        created_at=iso(inst.created_at), state_at=iso(inst.state_at))


def instance_json(inst: InstanceView) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(instance_reply(inst))
    return out


def eval_reply(view: EvalView) -> EvalReply:
    return EvalReply(
        id=view.id, job_id=view.job_id, status=view.status, triggered_by=view.triggered_by,
        previous_eval=view.previous_eval, next_eval=view.next_eval,
        blocked_eval=view.blocked_eval, priority=view.priority, node_id=view.node_id,
        wait_until=iso(view.wait_until), status_reason=view.status_reason,
        created_at=iso(view.created_at), modified_at=iso(view.modified_at))


def alloc_reply(alloc: AllocView) -> AllocReply:
    return AllocReply(
        id=alloc.id, job_id=alloc.job_id, node_id=alloc.node_id, index=alloc.index,
        status=alloc.status, desired=alloc.desired, exit_code=alloc.exit_code,
        requeue_count=alloc.requeue_count, requeue_allowed=alloc.requeue_allowed,
        previous_alloc=alloc.previous_alloc, migrate=alloc.migrate, eval_id=alloc.eval_id,
        pid=alloc.pid, reattached=alloc.reattached, status_reason=alloc.status_reason,
        resources=alloc.resources, command=list(alloc.command),
        job_version=alloc.job_version, created_at=iso(alloc.created_at),
        started_at=iso(alloc.started_at), finished_at=iso(alloc.finished_at),
        modified_at=iso(alloc.modified_at))


_LIVE = ("last_heartbeat", "heartbeat_age", "heartbeating", "allocations")
_json = msgspec.json.Encoder()
_WIRE = dict(zip(NodeDetail.__struct_fields__, NodeDetail.__struct_encode_fields__,
                 strict=True))
"""A field's name on the wire (``node_class`` is ``class``)."""


def _wire(fields: dict[str, Any]) -> dict[str, Any]:
    return {_WIRE[k]: v for k, v in fields.items()}


class _Entry:
    """One node's reply JSON around its live fields, valid while its view is ``view``."""

    __slots__ = ("beat_at", "beat_text", "head", "narrow", "timeout", "view", "wide")

    def __init__(self, view: NodeView, timeout: float) -> None:
        fields = _summary_fields(view, None, timeout, 0, None)   # no heartbeat: no time
        live_at = list(fields).index(_LIVE[0])
        keys = list(fields)
        head = _wire({k: fields[k] for k in keys[:live_at]})
        tail = _wire({k: fields[k] for k in keys[live_at + len(_LIVE):]})
        self.view = view
        self.timeout = timeout
        self.head = _json.encode(head)[:-1] + b","          # '{"id":...,"pool":...,'
        self.narrow = b"," + _json.encode(tail)[1:]         # ',"gpus":...}'
        self.wide: bytes | None = None
        self.beat_at = -1.0
        self.beat_text: str | None = None

    def tail(self, wide: bool) -> bytes:
        if not wide:
            return self.narrow
        if self.wide is None:
            rest = _json.encode(_wire(_detail_fields(self.view)))
            self.wide = self.narrow[:-1] + b"," + rest[1:]
        return self.wide


class NodeJsonCache:
    """``node_summary``/``node_detail`` as JSON bytes, the same bytes msgspec writes for
    them, built once per view version: a node's view is a frozen Struct replaced on every
    change, so an entry holds the view it was built from and is rebuilt when the table
    holds another. Only the live fields (heartbeat time and age, heartbeating,
    allocations) are written per request. ``last_heartbeat`` is formatted once per
    heartbeat: kept while the heartbeat's wall time moves by under a millisecond."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def item(self, view: NodeView, heartbeat_age: float | None,
             timeout: Callable[[NodeView], float], allocations: int, now: float, *,
             wide: bool) -> bytes:
        entry = self._entries.get(view.id)
        if entry is None or entry.view is not view:
            entry = self._entries[view.id] = _Entry(view, timeout(view))
        last_hb = None
        if heartbeat_age is not None:
            beat_at = now - heartbeat_age
            if abs(beat_at - entry.beat_at) >= 1e-3 or entry.beat_text is None:
                entry.beat_at = beat_at
                entry.beat_text = iso(datetime.fromtimestamp(beat_at, UTC))
            last_hb = entry.beat_text
        live = _json.encode({
            "last_heartbeat": last_hb,
            "heartbeat_age": None if heartbeat_age is None else round(heartbeat_age, 3),
            "heartbeating": heartbeat_age is not None and heartbeat_age < entry.timeout,
            "allocations": allocations})
        return entry.head + live[1:-1] + entry.tail(wide)

    def forget(self, node_ids: Iterable[str]) -> None:
        for node_id in node_ids:
            self._entries.pop(node_id, None)

    def keep_only(self, node_ids: Container[str]) -> None:
        self._entries = {k: v for k, v in self._entries.items() if k in node_ids}
