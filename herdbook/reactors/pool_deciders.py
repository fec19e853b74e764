"""The pool reconciler's deciders (Navarch): keep each pool within its bounds, fail
instances that never registered, replace unhealthy nodes. Pure: views and the time
come in, a plan comes out; each step of the plan is decided again from the view when the
instance manager (``control/instances.py``) carries it out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from herdbook.config import PoolConfig
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
from herdbook.events.node import NodeDrainStarted, NodeEvent, NodeTerminated
from herdbook.events.states import Health, InstanceState, Intent, Lifecycle, NodeClass
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Decision

LIVE = (InstanceState.PROVISIONING, InstanceState.PENDING_REGISTRATION, InstanceState.RUNNING)


@dataclass
class PoolPlan:
    provision: int = 0
    replace: list[str] = field(default_factory=list)        # node ids to replace
    drain: list[str] = field(default_factory=list)          # node ids to drain first
    terminate: list[tuple[str, str]] = field(default_factory=list)  # (instance id, reason)
    running: list[str] = field(default_factory=list)        # instances whose agent registered
    fail: list[tuple[str, str]] = field(default_factory=list)  # (instance id, reason)
    held: list[str] = field(default_factory=list)           # replacements the breaker holds
    inspect: list[str] = field(default_factory=list)
    """Unhealthy nodes not replaced: their verdict asks for a person (inspect_hardware) and
    the pool's provider gives the same hardware back (``replaces_hardware_faults``)."""


CLOUD_LIKE = frozenset({"fake"})
"""Providers whose replacement instance is other hardware (a new VM lands elsewhere)."""


def replaces_hardware_faults(pool: PoolConfig) -> bool:
    """Whether auto-replace acts on a node whose verdict says ``inspect_hardware``: the
    pool's ``health.replace_on_hardware_fault``, or by its provider where unset.
    Replacing a bare-metal node (or a ``local`` agent on the same host) brings the same
    bad GPU back, so it would loop: a person must look first."""
    explicit = pool.health.replace_on_hardware_fault
    return pool.provider in CLOUD_LIKE if explicit is None else explicit


def plan_pool(pool: PoolConfig, desired: int | None, instances: list[InstanceView],
              nodes: Mapping[str, NodeView], busy: dict[str, bool], now: datetime,
              registration_timeout: float,
              held: Callable[[NodeView], bool] | None = None) -> PoolPlan:
    """``busy``: node id -> whether it runs allocations and is reachable (drain first).
    ``held``: whether the circuit breaker holds the replacement of an unhealthy node
    (neither drained nor replaced: listed in ``plan.held``)."""
    plan = PoolPlan()
    live = [i for i in instances if i.state in LIVE]
    for inst in live:
        node = nodes.get(inst.node_id)
        if inst.state is InstanceState.PENDING_REGISTRATION:
            if node is not None and node.info.instance_id == inst.id:
                plan.running.append(inst.id)
            elif inst.state_at and (now - inst.state_at).total_seconds() >= registration_timeout:
                plan.fail.append((inst.id, f"no registration within {registration_timeout:g}s"))
    failing = {iid for iid, _ in plan.fail}
    live = [i for i in live if i.id not in failing]

    # auto-replacement of unhealthy nodes, one per cooldown
    if pool.health.auto_replace:
        last = max((i.created_at for i in instances if i.replaces and i.created_at),
                   default=None)
        cooled = last is None or (now - last).total_seconds() >= float(pool.cooldown)
        for inst in live:
            node = nodes.get(inst.node_id)
            if (inst.state is not InstanceState.RUNNING or node is None
                    or node.health is not Health.UNHEALTHY):
                continue
            if node.health_action == "inspect_hardware" and not replaces_hardware_faults(pool):
                plan.inspect.append(node.id)
                continue
            if held is not None and held(node):
                plan.held.append(node.id)
                continue
            if busy.get(node.id) and node.intent not in (Intent.DRAINING, Intent.DRAINED):
                plan.drain.append(node.id)
            elif node.intent is Intent.DRAINING and busy.get(node.id):
                continue   # wait for the drain
            elif cooled:
                plan.replace.append(node.id)
                plan.terminate.append((inst.id, f"node {node.id} unhealthy: {node.health_reason}"))
                cooled = False
        replaced = {iid for iid, _ in plan.terminate}
        live = [i for i in live if i.id not in replaced]

    target = max(pool.min_nodes, min(pool.max_nodes,
                                     desired if desired is not None else pool.min_nodes))
    count = len(live)        # the replaced ones no longer count: their successors do
    if count < target:
        plan.provision = target - count   # the first len(plan.replace) are the replacements
    elif count > target:
        plan.terminate += _scale_down(live, nodes, busy, count - target, plan)
    return plan


def _scale_down(live: list[InstanceView], nodes: Mapping[str, NodeView], busy: dict[str, bool],
                excess: int, plan: PoolPlan) -> list[tuple[str, str]]:
    """Cordoned (or drained) nodes first, then idle ones, then the rest; a node that runs
    allocations is drained before its instance is terminated."""
    def rank(inst: InstanceView) -> tuple[int, str]:
        node = nodes.get(inst.node_id)
        if node is None or inst.state is not InstanceState.RUNNING:
            return (0, inst.id)
        if node.intent in (Intent.CORDONED, Intent.DRAINED) or node.lifecycle in (
                Lifecycle.DOWN, Lifecycle.FAILED):
            return (1, inst.id)
        return (2 if not busy.get(node.id) else 3, inst.id)

    out = []
    for inst in sorted(live, key=rank)[:excess]:
        node = nodes.get(inst.node_id)
        if node is not None and busy.get(node.id) and node.intent is not Intent.DRAINED:
            if node.intent is not Intent.DRAINING:
                plan.drain.append(node.id)
            continue
        out.append((inst.id, "scale down"))
    return out


# Each step of a plan, decided again from the current view when it is carried out (after
# a conflict, from the newer one): a step whose reason has gone decides nothing.

ACTOR = "instance-manager"


def decide_provisioning(instance_id: str, pool_name: str, pool: PoolConfig,
                        replaces: str | None) -> Decision[InstanceEvent]:
    """A new instance (``instance_id`` is new: expected version 0)."""
    return Decision(0, [InstanceProvisioning(
        instance_id=instance_id, pool=pool_name, provider=pool.provider, node_id=instance_id,
        node_class=NodeClass(pool.node_class), labels=dict(pool.labels),
        reason=f"replaces {replaces}" if replaces else "pool below its target size",
        replaces=replaces, actor=ACTOR)])


def decide_provisioned(inst: InstanceView | None, ref: str) -> Decision[InstanceEvent] | None:
    if inst is None or inst.state is not InstanceState.PROVISIONING:
        return None
    return Decision(inst.version, [InstanceProvisioned(instance_id=inst.id, provider_ref=ref,
                                                       actor=ACTOR)])


def decide_provision_failed(inst: InstanceView | None,
                            error: str) -> Decision[InstanceEvent] | None:
    """The provider refused: the error, then FAILED."""
    if inst is None or inst.state is not InstanceState.PROVISIONING:
        return None
    return Decision(inst.version, [
        InstanceProviderError(instance_id=inst.id, operation="provision", reason=error,
                              actor=ACTOR),
        InstanceFailed(instance_id=inst.id, reason=f"provisioning failed: {error}",
                       actor=ACTOR)])


def decide_running(inst: InstanceView | None) -> Decision[InstanceEvent] | None:
    """Its agent registered (``plan_pool``): RUNNING, if still waiting for it."""
    if inst is None or inst.state is not InstanceState.PENDING_REGISTRATION:
        return None
    return Decision(inst.version, [InstanceRunning(instance_id=inst.id, node_id=inst.node_id,
                                                   actor=ACTOR)])


def decide_failed(inst: InstanceView | None, reason: str) -> Decision[InstanceEvent] | None:
    if inst is None or inst.state not in LIVE:
        return None
    return Decision(inst.version, [InstanceFailed(instance_id=inst.id, reason=reason,
                                                  actor=ACTOR)])


def decide_terminating(inst: InstanceView | None,
                       reason: str) -> Decision[InstanceEvent] | None:
    if inst is None or inst.state not in LIVE:
        return None
    return Decision(inst.version, [InstanceTerminating(instance_id=inst.id, reason=reason,
                                                       actor=ACTOR)])


def decide_terminate_error(inst: InstanceView | None,
                           error: str) -> Decision[InstanceEvent] | None:
    if inst is None:
        return None
    return Decision(inst.version, [InstanceProviderError(
        instance_id=inst.id, operation="terminate", reason=error, actor=ACTOR)])


def decide_terminated(inst: InstanceView | None, reason: str) -> Decision[InstanceEvent] | None:
    if inst is None or inst.state is not InstanceState.TERMINATING:
        return None
    return Decision(inst.version, [InstanceTerminated(instance_id=inst.id, reason=reason,
                                                      actor=ACTOR)])


def decide_drain_first(node: NodeView | None) -> Decision[NodeEvent] | None:
    """A node that runs allocations is drained before its instance is terminated."""
    if node is None or node.intent in (Intent.DRAINING, Intent.DRAINED):
        return None
    return Decision(node.version, [NodeDrainStarted(
        node_id=node.id, actor=ACTOR, reason="drained before its instance is terminated")])


def decide_node_terminated(node: NodeView | None, instance_id: str,
                           reason: str) -> Decision[NodeEvent] | None:
    if node is None or node.lifecycle is Lifecycle.TERMINATED:
        return None
    return Decision(node.version, [NodeTerminated(
        node_id=node.id, instance_id=instance_id, actor=ACTOR,
        reason=f"instance {instance_id} terminated: {reason}")])
