"""The pool reconciler's decider (Navarch): keep each pool within its bounds, fail
instances that never registered, replace unhealthy nodes. Pure: views and the time
come in, a plan comes out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from herdbook.config import PoolConfig
from herdbook.events.states import Health, InstanceState, Intent, Lifecycle
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView

LIVE = (InstanceState.PROVISIONING, InstanceState.PENDING_REGISTRATION, InstanceState.RUNNING)


@dataclass
class PoolPlan:
    provision: int = 0
    replace: list[str] = field(default_factory=list)        # node ids to replace
    drain: list[str] = field(default_factory=list)          # node ids to drain first
    terminate: list[tuple[str, str]] = field(default_factory=list)  # (instance id, reason)
    running: list[str] = field(default_factory=list)        # instances whose agent registered
    fail: list[tuple[str, str]] = field(default_factory=list)  # (instance id, reason)


def plan_pool(pool: PoolConfig, desired: int | None, instances: list[InstanceView],
              nodes: Mapping[str, NodeView], busy: dict[str, bool], now: datetime,
              registration_timeout: float) -> PoolPlan:
    """``busy``: node id -> whether it runs allocations and is reachable (drain first)."""
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
