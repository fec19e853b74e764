"""The pool reconciler's decider: bounds, scale-down order, registration timeout,
auto-replacement and its cooldown. Pure, with the time passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from herdbook.config import parse_config
from herdbook.events.node import NodeInfo
from herdbook.events.states import Approval, Health, InstanceState, Intent, Lifecycle, NodeType
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.pool_deciders import plan_pool

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
POOL = parse_config(b"pools: {p: {min_nodes: 2, max_nodes: 4, cooldown: 5m,"
                    b" health: {auto_replace: true}}}").pools["p"]


def inst(n: int, state: InstanceState = InstanceState.RUNNING, age: float = 60,
         replaces: str | None = None) -> InstanceView:
    at = NOW - timedelta(seconds=age)
    return InstanceView(id=f"i{n}", pool="p", provider="fake", node_id=f"n{n}", state=state,
                        created_at=at, state_at=at, replaces=replaces)


def node(n: int, intent: Intent = Intent.ELIGIBLE, health: Health = Health.HEALTHY,
         instance: str | None = None) -> NodeView:
    return NodeView(id=f"n{n}", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, intent=intent, health=health,
                    info=NodeInfo(instance_id=instance or f"i{n}"))


def plan(instances: list[InstanceView], nodes: list[NodeView], desired: int | None = None,
         busy: dict[str, bool] | None = None):  # type: ignore[no-untyped-def]
    return plan_pool(POOL, desired, instances, {v.id: v for v in nodes}, busy or {}, NOW, 600)


def test_a_pool_below_min_provisions_the_difference() -> None:
    assert plan([], []).provision == 2
    assert plan([inst(1)], [node(1)]).provision == 1
    assert plan([inst(1), inst(2, InstanceState.FAILED)], [node(1)]).provision == 1


def test_desired_size_is_clamped_to_the_bounds() -> None:
    assert plan([], [], desired=9).provision == 4
    assert plan([], [], desired=0).provision == 2


def test_scale_down_takes_cordoned_then_idle_and_drains_busy_nodes() -> None:
    instances = [inst(n) for n in range(1, 5)]
    nodes = [node(1), node(2, Intent.CORDONED), node(3), node(4)]
    result = plan(instances, nodes, desired=2, busy={"n1": True})
    assert [iid for iid, _ in result.terminate] == ["i2", "i3"]
    result = plan(instances, nodes, desired=2, busy={"n3": True, "n4": True, "n1": True})
    assert [iid for iid, _ in result.terminate] == ["i2"]
    assert result.drain == ["n1"] or result.drain == ["n3"]


def test_an_instance_that_never_registers_fails_after_the_timeout() -> None:
    waiting = inst(1, InstanceState.PENDING_REGISTRATION, age=599)
    assert plan([waiting], []).fail == []
    late = inst(1, InstanceState.PENDING_REGISTRATION, age=600)
    result = plan([late], [])
    assert [iid for iid, _ in result.fail] == ["i1"] and result.provision == 2


def test_a_registered_agent_makes_its_instance_running() -> None:
    waiting = inst(1, InstanceState.PENDING_REGISTRATION, age=5)
    assert plan([waiting], [node(1)]).running == ["i1"]
    assert plan([waiting], [node(1, instance="other")]).running == []


def test_an_unhealthy_node_is_replaced_once_per_cooldown() -> None:
    instances = [inst(1), inst(2)]
    nodes = [node(1, health=Health.UNHEALTHY), node(2, health=Health.UNHEALTHY)]
    result = plan(instances, nodes)
    assert result.replace == ["n1"] and [i for i, _ in result.terminate] == ["i1"]
    assert result.provision == 1
    recent = [*instances, inst(3, replaces="n0", age=60)]
    assert plan(recent, nodes).replace == []
    cooled = [*instances, inst(3, replaces="n0", age=301)]
    assert plan(cooled, nodes).replace == ["n1"]


def test_a_busy_unhealthy_node_is_drained_before_it_is_replaced() -> None:
    instances = [inst(1), inst(2)]
    result = plan(instances, [node(1, health=Health.UNHEALTHY), node(2)], busy={"n1": True})
    assert result.drain == ["n1"] and result.replace == []
    draining = node(1, Intent.DRAINING, Health.UNHEALTHY)
    assert plan(instances, [draining, node(2)], busy={"n1": True}).replace == []
    # its allocations are gone: now it is replaced
    assert plan(instances, [draining, node(2)], busy={"n1": False}).replace == ["n1"]


def test_a_hardware_fault_stays_out_of_the_auto_replace_loop_where_the_provider_says() -> None:
    from msgspec.structs import replace

    from herdbook.reactors.pool_deciders import replaces_hardware_faults
    instances = [inst(1), inst(2)]
    bad_gpu = replace(node(1, health=Health.UNHEALTHY), health_action="inspect_hardware")
    reboot = replace(node(2, health=Health.UNHEALTHY), health_action="reboot_node")
    # local (the same host's agents, like bare metal): a replacement brings the GPU back
    assert not replaces_hardware_faults(POOL)
    result = plan(instances, [bad_gpu, node(2)])
    assert result.inspect == ["n1"] and result.replace == [] and result.drain == []
    assert plan(instances, [bad_gpu, node(2)], busy={"n1": True}).drain == []
    assert plan(instances, [reboot, node(1)]).replace == ["n2"]   # other actions: replaced
    # a cloud-like provider, or the pool's own setting, replaces it
    cloud = replace(POOL, provider="fake")
    assert replaces_hardware_faults(cloud)
    assert plan_pool(cloud, None, instances, {"n1": bad_gpu, "n2": node(2)}, {}, NOW,
                     600).replace == ["n1"]
    told = parse_config(b"pools: {p: {health: {auto_replace: true, "
                        b"replace_on_hardware_fault: true}}}").pools["p"]
    assert replaces_hardware_faults(told)
    assert plan_pool(told, None, instances, {"n1": bad_gpu, "n2": node(2)}, {}, NOW,
                     600).replace == ["n1"]
