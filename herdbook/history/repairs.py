"""Repair episodes: a pure fold over the node events, ``apply(state, event, seq) -> state``
(docs/remediation.md#repairs).

An **episode** is one fault of one node, from its first sign to the node back in service:

- it **opens** on a fault of an approved compute node: ``node.health_changed`` to
  UNHEALTHY, ``node.down``, ``node.failed``, a boot check that fails the node,
  ``node.wipe_failed`` (QUARANTINED) or ``node.validation_failed``. A DEGRADED verdict or
  a missed heartbeat (``node.degraded``) alone opens none (the node may well recover by
  itself); it is a *sign*, and when a fault follows while the sign holds, the episode
  was **detected** at the sign;
- **quarantined**: the first time at or after detection the node is out of service
  (not schedulable: UNHEALTHY, DOWN, cordoned, drained, DEGRADED liveness, ...), with
  who and how; a node already out of service when the fault came is quarantined at once;
- **drained**: the first ``node.drained`` in the episode (none where nothing ran or the
  node died with its work);
- **remediated**: the first repair action: a reboot (``node.boot_started`` of trigger
  reboot), a restart (the agent started again, a new registration), the agent back
  (``node.recovered``), a replacement (``node.terminated``), a wipe, or an operator's
  uncordon or enable;
- **validated**: ``node.validated`` (the validation gate), where it runs;
- **back in service**: the node schedulable again (approved, READY, not UNHEALTHY,
  ELIGIBLE, not VALIDATING: ``NodeView.schedulable``), which closes the episode. Where
  the validation gate is configured (``gated``: the triggers of ``validation.when``), a
  node due for a validation by one of them is not back yet, even while READY: it is
  back at ``node.validated``. A replaced node's episode closes when its successor (the instance
  whose ``replaces`` names it) is first schedulable. A node deleted (not replaced) closes
  its episode as ``deleted``, out of every duration.

Durations of a closed episode (seconds): ``time_to_quarantine`` = quarantined -
detected, ``time_to_drain`` = drained - quarantined, ``time_in_repair`` = back -
quarantined, ``mttr`` = back - detected.

Times are the events' ``at`` (the control plane's clock, which appends them), made
non-decreasing per node so that a step never precedes the one before it.

Availability: the fold also keeps, per node, when it was *owned* (approved compute, not
TERMINATED or deleted) and *in service* (schedulable), with its GPU count
(``info.gpus``): ``availability(state, start, end)`` is GPU-hours in service / GPU-hours
owned over the window (node-hours where the fleet has no GPUs).

The state is mutated in place and returned (as ``projector.node_fold.apply_all`` does: a
copy per event would cost a fleet's worth of dicts); ``apply`` does no I/O and reads no
clock. An event at or below the last sequence folded is ignored, so a replay is harmless.

What the fold keeps (episodes, signs, service segments) is ``repair_episodes.py``; the
queries over it (episodes in a window, duration percentiles, availability),
``repair_queries.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from msgspec.structs import replace

from herdbook.events.codec import AnyNodeEvent
from herdbook.events.health_report import VERDICT_LEVELS, NodeHealthChanged
from herdbook.events.instance import InstanceProvisioning
from herdbook.events.node import NodeBootChecked, NodeBootStarted, NodeEvent
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.history.repair_episodes import Episode, RepairsState, RepairStep, Segment, Sign
from herdbook.projector.node_fold import apply as apply_node
from herdbook.projector.node_view import NodeView

LEVEL_ORDER = VERDICT_LEVELS   # least to most severe

FAULTS = frozenset({"health_changed", "down", "failed", "boot_checked", "wipe_failed",
                    "validation_failed"})
"""The events that may open an episode (each checked by ``fault_of``)."""
SIGNS = frozenset({"health_changed", "degraded"})
"""The events that may be a first sign (``sign_of``)."""
REMEDIES: dict[str, str] = {
    "boot_started": "restart", "registered": "restart", "recovered": "recovered",
    "terminated": "replace", "uncordoned": "operator", "enabled": "operator",
    "wipe_started": "wipe"}
"""An event in an open episode -> the remediation it is (a reboot: ``boot_started`` of
trigger reboot)."""
STEPS = frozenset({"cordoned", "uncordoned", "drain_started", "drained", "undrained",
                   "disabled", "enabled", "boot_started", "boot_checked", "registered",
                   "recovered", "degraded", "down", "failed", "terminated", "wipe_started",
                   "wiped", "wipe_failed", "validation_started", "validated",
                   "validation_failed", "health_changed", "action_held", "deleted"})
"""The node events written into an open episode's steps."""
IGNORED = frozenset({"info_updated", "approved", "rejected", "declared",
                     "notification_failed", "claimed", "released", "wipe_step",
                     "conformance_changed", "validation_due"})
"""Node events that are no step of a repair (they still move the node's view, and so
whether it is in service). A unit test holds every node event to one of the two."""
OUT_OF_SERVICE = frozenset({Lifecycle.DEGRADED, Lifecycle.DOWN, Lifecycle.FAILED,
                            Lifecycle.QUARANTINED})


def owned(view: NodeView | None) -> bool:
    return (view is not None and view.type is NodeType.COMPUTE
            and view.approval is Approval.APPROVED
            and view.lifecycle is not Lifecycle.TERMINATED)


def in_service(view: NodeView | None, gated: frozenset[str] = frozenset()) -> bool:
    return (view is not None and owned(view) and view.schedulable
            and view.validation_due not in gated)


def pool_of(view: NodeView | None) -> str:
    return view.info.labels.get("pool", "") if view is not None else ""


def fault_of(event: NodeEvent, after: NodeView) -> tuple[str, int, str] | None:
    """(kind, xid, reason) where ``event`` is a fault of the node as it now is."""
    name = event.event_name
    if name not in FAULTS:
        return None
    if isinstance(event, NodeHealthChanged):
        if event.gpus_only or event.health is not Health.UNHEALTHY:
            return None
        worst = max(event.gpus.values(), default=None,
                    key=lambda v: LEVEL_ORDER.index(v.level) if v.level in LEVEL_ORDER else 0)
        if worst is None:
            return "health", 0, event.reason
        return worst.kind or worst.rule or "health", worst.xid, event.reason
    if isinstance(event, NodeBootChecked):
        if event.passed or after.lifecycle is not Lifecycle.FAILED:
            return None
        return "boot_check", 0, after.lifecycle_reason
    kinds = {"down": "down", "failed": "failed", "wipe_failed": "wipe_failed",
             "validation_failed": "validation"}
    return kinds[name], 0, str(getattr(event, "reason", "")) or name


def sign_of(event: NodeEvent) -> str | None:
    """What a first sign says, where ``event`` is one."""
    if isinstance(event, NodeHealthChanged):
        if event.gpus_only or event.health is not Health.DEGRADED:
            return None
        return f"degraded: {event.reason}" if event.reason else "degraded"
    if event.event_name == "degraded":
        return str(getattr(event, "reason", "")) or "heartbeat missed"
    return None


def signs_remain(view: NodeView) -> bool:
    return (view.health in (Health.DEGRADED, Health.UNHEALTHY)
            or view.lifecycle in OUT_OF_SERVICE)


def how_out(view: NodeView) -> str:
    """The node's state as a word: why it is not schedulable."""
    return view.state.lower()


def apply(state: RepairsState, event: NodeEvent | InstanceProvisioning | Any,
          seq: int) -> RepairsState:
    """Fold one event stored at ``seq``. Every event but node events and
    ``instance.provisioning`` is ignored."""
    if seq and seq <= state.seq:
        return state
    state.seq = max(state.seq, seq)
    if isinstance(event, InstanceProvisioning):
        if event.replaces:
            state.successors[event.node_id] = event.replaces
        return state
    if not isinstance(event, NodeEvent):
        return state
    node_id = event.node_id
    before = state.views.get(node_id)
    after = apply_node(before, cast(AnyNodeEvent, event), seq)
    if after is None:
        state.views.pop(node_id, None)
    else:
        state.views[node_id] = after
    at = max(event.at, state.last_at.get(node_id, event.at))  # never back in time
    state.last_at[node_id] = at
    _track_service(state, node_id, after, at)
    before_in, after_in = in_service(before, state.gated), in_service(after, state.gated)
    episode = state.open.get(node_id)
    if episode is not None:
        _advance(state, episode, after, after_in, event, at)
    elif after is not None and owned(after) and not after_in:
        _detect(state, before_in, before, after, event, at, seq)
    elif after is not None and owned(after):
        _sign(state, after, event, at, seq)
    else:
        state.signs.pop(node_id, None)
    if after_in and not before_in and node_id in state.successors:
        _successor_back(state, state.successors.pop(node_id), node_id, event, at)
    return state


def _track_service(state: RepairsState, node_id: str, after: NodeView | None,
                   at: datetime) -> None:
    segment = Segment(at, owned(after), in_service(after, state.gated),
                      len(after.info.gpus) if after is not None else 0, pool_of(after))
    segments = state.segments.setdefault(node_id, [])
    last = segments[-1] if segments else None
    if last is None and not segment.owned:
        return      # never owned yet: nothing to count
    if last is not None and (last.owned, last.in_service, last.gpus, last.pool) == (
            segment.owned, segment.in_service, segment.gpus, segment.pool):
        return
    segments.append(segment)


def _sign(state: RepairsState, after: NodeView, event: NodeEvent, at: datetime,
          seq: int, out: bool = False) -> None:
    """A first sign noted, kept while it holds, and when the node left service after it."""
    node_id = after.id
    sign = state.signs.get(node_id)
    said = sign_of(event)
    if sign is None and said is not None:
        sign = Sign(seq=seq, at=at, actor=event.actor, detail=said)
    if sign is None:
        return
    if not signs_remain(after):
        state.signs.pop(node_id, None)
        return
    if sign.out_at is None and out:
        sign = replace(sign, out_at=at, out_by=event.actor, out_how=how_out(after))
    state.signs[node_id] = sign


def _detect(state: RepairsState, before_in: bool, before: NodeView | None,
            after: NodeView, event: NodeEvent, at: datetime, seq: int) -> None:
    """The node is out of service: a fault opens an episode, anything else may be or
    follow a sign. (A fault that leaves the node in service, a late word on a settled
    validation, is none.)"""
    node_id = after.id
    fault = fault_of(event, after)
    if fault is None:
        _sign(state, after, event, at, seq, out=True)
        return
    sign = state.signs.pop(node_id, None)
    kind, xid, reason = fault
    steps: list[RepairStep] = []
    if sign is not None:
        detected_at, detected_by, first = sign.at, sign.actor, sign.seq
        steps.append(RepairStep(step="detected", at=sign.at, actor=sign.actor, detail=sign.detail))
        steps.append(RepairStep(step=event.event_name, at=at, actor=event.actor, detail=reason))
    else:
        detected_at, detected_by, first = at, event.actor, seq
        steps.append(RepairStep(step="detected", at=at, actor=event.actor,
                          detail=f"{event.event_name}: {reason}" if reason else event.event_name))
    if sign is not None and sign.out_at is not None:
        out_at, out_by, out_how = sign.out_at, sign.out_by, sign.out_how
    elif before is not None and not before_in:
        out_at, out_by, out_how = detected_at, before.intent_actor, f"already {how_out(before)}"
    else:
        out_at, out_by, out_how = at, event.actor, how_out(after)
    steps.append(RepairStep(step="quarantined", at=out_at, actor=out_by, detail=out_how))
    steps.sort(key=lambda s: s.at)
    episode = Episode(
        id=f"{node_id}:{first}", node_id=node_id, pool=pool_of(after), kind=kind, xid=xid,
        reason=reason, gpus=len(after.info.gpus), detected_at=detected_at,
        detected_by=detected_by, quarantined_at=out_at, quarantined_by=out_by,
        quarantine=out_how, steps=tuple(steps))
    state.open[node_id] = episode


def _detail(event: NodeEvent) -> str:
    if isinstance(event, NodeBootStarted):
        return event.trigger
    if isinstance(event, NodeBootChecked):
        return "passed" if event.passed else "failed"
    if isinstance(event, NodeHealthChanged):
        return f"{event.health.value.lower()}: {event.reason}" if event.reason \
            else event.health.value.lower()
    return str(getattr(event, "reason", "") or getattr(event, "check", "") or "")


def _advance(state: RepairsState, episode: Episode, after: NodeView | None, back: bool,
             event: NodeEvent, at: datetime) -> None:
    name = event.event_name
    if name not in STEPS or (isinstance(event, NodeHealthChanged) and event.gpus_only):
        if back:
            _close(state, episode, at, event.actor, "back")
        return
    changes: dict[str, Any] = {
        "steps": (*episode.steps, RepairStep(step=name, at=at, actor=event.actor,
                                       detail=_detail(event)))}
    if name == "drained" and episode.drained_at is None:
        changes.update(drained_at=at, drained_by=event.actor)
    if name == "validated" and episode.validated_at is None:
        changes.update(validated_at=at, validated_by=event.actor)
    remedy = REMEDIES.get(name)
    if isinstance(event, NodeBootStarted) and event.trigger == "reboot":
        remedy = "reboot"
    if remedy is not None and episode.remediated_at is None:
        changes.update(remediated_at=at, remediated_by=event.actor, remediation=remedy)
    episode = replace(episode, **changes)
    state.open[episode.node_id] = episode
    if after is None and episode.remediation != "replace":
        _close(state, episode, at, event.actor, "deleted")
    elif back:
        _close(state, episode, at, event.actor, "back")


def _successor_back(state: RepairsState, replaced: str, successor: str, event: NodeEvent,
                    at: datetime) -> None:
    episode = state.open.get(replaced)
    if episode is None:
        return
    at = max(at, episode.steps[-1].at)  # the successor's clock: never before the last step
    step = RepairStep(step="replacement_in_service", at=at, actor=event.actor, detail=successor)
    changes: dict[str, Any] = {"steps": (*episode.steps, step), "replaced_by": successor}
    if episode.remediated_at is None:
        changes.update(remediated_at=at, remediated_by=event.actor, remediation="replace")
    _close(state, replace(episode, **changes), at, event.actor, "back")


def _close(state: RepairsState, episode: Episode, at: datetime, actor: str,
           outcome: str) -> None:
    steps = episode.steps
    if outcome == "back":
        steps = (*steps, RepairStep(step="back_in_service", at=at, actor=actor))
    state.open.pop(episode.node_id, None)
    state.closed.append(replace(episode, back_at=at if outcome == "back" else None,
                                back_by=actor if outcome == "back" else "",
                                outcome=outcome, steps=steps))


def fold(events: Iterable[tuple[int, Any]], state: RepairsState | None = None) -> RepairsState:
    """``apply`` over (sequence, event) pairs in stream order."""
    state = state if state is not None else RepairsState()
    for seq, event in events:
        apply(state, event, seq)
    return state
