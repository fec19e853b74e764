"""Operator command deciders: cordon, uncordon, drain, undrain, disable, enable, reboot,
add. Pure: the view and what the control plane knows of the node's heartbeats come in,
an event or ``CommandRefused`` comes out. The state machine tables decide what is allowed.
A command whose goal already holds raises ``AlreadyDone`` (a success with nothing
appended, naming the state): cordon, uncordon, drain, undrain, disable, enable, claim
by the claimant, release; reboot and wipe are actions, never no-ops."""

from __future__ import annotations

from dataclasses import dataclass

from herdbook.events.machine import IntentTrigger, LifecycleTrigger, next_intent, next_lifecycle
from herdbook.events.node import (
    NodeBootStarted,
    NodeClaimed,
    NodeCordoned,
    NodeDisabled,
    NodeDrainStarted,
    NodeEnabled,
    NodeEvent,
    NodeReleased,
    NodeUncordoned,
    NodeUndrained,
    NodeWipeStarted,
)
from herdbook.events.states import Health, Intent, NodeClass
from herdbook.projector.node_view import NodeView
from herdbook.reactors.refused import AlreadyDone, CommandRefused


@dataclass(frozen=True)
class HeartbeatFacts:
    """What this control plane knows of the node's heartbeats: what ``undrain`` and
    ``enable`` decide from."""

    heartbeat_age: float | None      # None: never heartbeated
    heartbeat_timeout: float
    gpu_count: int | None = None     # in the last heartbeat
    fingerprint: str | None = None   # last reported conformance fingerprint

    @property
    def recent(self) -> bool:
        return self.heartbeat_age is not None and self.heartbeat_age < self.heartbeat_timeout


def _intent(view: NodeView, command: IntentTrigger) -> None:
    if next_intent(view.intent, command) is None:
        raise CommandRefused(f"cannot {command.value} node {view.id}: it is {view.intent.value} "
                             f"(state {view.state})")


def decide_cordon(view: NodeView, actor: str, reason: str) -> NodeEvent:
    if view.intent is Intent.CORDONED:
        raise AlreadyDone(f"node {view.id} already cordoned (state {view.state})")
    _intent(view, IntentTrigger.CORDON)
    return NodeCordoned(node_id=view.id, actor=actor, reason=reason)


def decide_uncordon(view: NodeView, actor: str, reason: str) -> NodeEvent:
    """Uncordon also clears a sticky UNHEALTHY or a (held) DEGRADED verdict; refused when
    none applies."""
    if view.intent is Intent.ELIGIBLE and view.health not in (Health.UNHEALTHY,
                                                               Health.DEGRADED):
        raise AlreadyDone(f"node {view.id} already uncordoned (state {view.state})")
    if view.intent is not Intent.CORDONED and view.health not in (Health.UNHEALTHY,
                                                                   Health.DEGRADED):
        raise CommandRefused(f"cannot uncordon node {view.id}: it is neither cordoned nor unhealthy "
                             f"or degraded (state {view.state})")
    return NodeUncordoned(node_id=view.id, actor=actor, reason=reason)


def decide_drain(view: NodeView, actor: str, reason: str, urgent: bool = False,
                 deadline_s: float | None = None) -> NodeEvent:
    """Draining or drained already is a no-op, unless this drain asks for more (urgent
    where it was not, a deadline): then it is refused, as before."""
    if view.intent is Intent.DRAINED or (
            view.intent is Intent.DRAINING and (view.drain_urgent or not urgent)
            and deadline_s is None):
        raise AlreadyDone(f"node {view.id} already {view.intent.value.lower()} "
                          f"(state {view.state})")
    _intent(view, IntentTrigger.DRAIN)
    return NodeDrainStarted(node_id=view.id, actor=actor, reason=reason, urgent=urgent,
                            deadline_s=deadline_s)


def decide_undrain(view: NodeView, actor: str, reason: str, live: HeartbeatFacts) -> NodeEvent:
    """Back to scheduling only if the node passes the health check of Lattice: a recent
    heartbeat, its GPU count equal to its capabilities, a conformance fingerprint."""
    if view.intent is Intent.ELIGIBLE:
        raise AlreadyDone(f"node {view.id} already undrained (state {view.state})")
    _intent(view, IntentTrigger.UNDRAIN)
    if not live.recent:
        raise CommandRefused(f"cannot undrain node {view.id}: no recent heartbeat")
    expected = len(view.info.gpus)
    if live.gpu_count != expected:
        raise CommandRefused(f"cannot undrain node {view.id}: it reports {live.gpu_count} GPUs, "
                             f"its capabilities say {expected}")
    if not live.fingerprint:
        raise CommandRefused(f"cannot undrain node {view.id}: no conformance fingerprint reported")
    return NodeUndrained(node_id=view.id, actor=actor, reason=reason)


def decide_disable(view: NodeView, actor: str, reason: str) -> NodeEvent:
    if view.intent is Intent.DISABLED:
        raise AlreadyDone(f"node {view.id} already disabled (state {view.state})")
    _intent(view, IntentTrigger.DISABLE)
    if next_lifecycle(view.lifecycle, LifecycleTrigger.DISABLE) is None:
        raise CommandRefused(f"cannot disable node {view.id}: it is {view.lifecycle.value}")
    return NodeDisabled(node_id=view.id, actor=actor, reason=reason)


def decide_enable(view: NodeView, actor: str, reason: str, live: HeartbeatFacts,
                  force: bool = False) -> NodeEvent:
    if view.intent is not Intent.DISABLED:
        raise AlreadyDone(f"node {view.id} already enabled (state {view.state})")
    if not live.recent and not force:
        raise CommandRefused(f"cannot enable node {view.id}: no recent heartbeat (use --force)")
    return NodeEnabled(node_id=view.id, actor=actor, reason=reason, forced=force)


def decide_reboot(view: NodeView, actor: str, reason: str) -> NodeEvent:
    if next_lifecycle(view.lifecycle, LifecycleTrigger.REBOOT) is None:
        raise CommandRefused(f"cannot reboot node {view.id}: it is {view.lifecycle.value}; reboot "
                             "takes a DOWN or FAILED node")
    return NodeBootStarted(node_id=view.id, actor=actor, reason=reason or "reboot requested",
                           trigger=LifecycleTrigger.REBOOT.value)


# sensitive nodes (Lattice) -------------------------------------------------------------

def decide_claim(view: NodeView, actor: str, user: str, tenant: str,
                 reason: str = "") -> NodeEvent:
    """A user claims a sensitive node explicitly. Appended with the node's version: of two
    concurrent claims the first wins and the other, deciding again, is refused here."""
    if view.claimed_by and view.claimed_by == user:
        raise AlreadyDone(f"node {view.id} already claimed by {user}"
                          + (f" (tenant {view.tenant})" if view.tenant else ""))
    if view.claimed_by:
        raise CommandRefused(f"node {view.id} is already claimed by {view.claimed_by}"
                      + (f" (tenant {view.tenant})" if view.tenant else ""))
    if view.info.node_class is not NodeClass.SENSITIVE:
        raise CommandRefused(f"node {view.id} is {view.info.node_class.value}: only sensitive nodes "
                             "are claimed (the scheduler assigns the others)")
    if not user:
        raise CommandRefused("a claim needs --user")
    if not view.schedulable:
        raise CommandRefused(f"cannot claim node {view.id}: it is {view.state}, not READY in the pool")
    return NodeClaimed(node_id=view.id, actor=actor, user=user, tenant=tenant, reason=reason)


def decide_release(view: NodeView, actor: str, user: str = "", reason: str = "") -> NodeEvent:
    if not view.claimed_by:
        raise AlreadyDone(f"node {view.id} already released (not claimed)")
    return NodeReleased(node_id=view.id, actor=actor, user=user or view.claimed_by,
                        reason=reason)


def decide_wipe(view: NodeView, actor: str, reason: str, force: bool,
                timeout_s: float) -> NodeEvent:
    """`herd admin node wipe --force`: run the wipe again (a QUARANTINED node's way back)."""
    if view.info.node_class is not NodeClass.SENSITIVE:
        raise CommandRefused(f"node {view.id} is {view.info.node_class.value}: only sensitive nodes "
                             "are wiped")
    if not force:
        raise CommandRefused(f"wiping node {view.id} erases its disks: use --force")
    if next_lifecycle(view.lifecycle, LifecycleTrigger.WIPE) is None:
        raise CommandRefused(f"cannot wipe node {view.id}: it is {view.lifecycle.value}")
    return NodeWipeStarted(node_id=view.id, actor=actor, attempt=view.wipe_attempt + 1,
                           forced=True, timeout_s=timeout_s, reason=reason or "forced wipe")
