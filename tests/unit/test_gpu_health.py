"""Per-GPU verdicts (issue 27 item 3): computed by the classifier beside the node's verdict,
carried on ``node.health_changed`` (``gpus``) and folded into the view, never parsed
from reason text.

Given a READY node and the built-in policy, when its agent reports GPU faults, then the
view holds each faulty GPU's verdict with its cause (rule, kind, XID, since); a GPU's
critical verdict stays until the operator's uncordon; a second GPU's fault on a node whose
health does not change is one ``gpus_only`` change the notifier ignores. Pure (the
classifier over the fake store, the reports' stored times passed in)."""

from __future__ import annotations

import pytest

from herdbook.events.codec import decode_event, encode
from herdbook.events.health_report import GpuEvent, GpuVerdict, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeUncordoned
from herdbook.events.states import Health
from herdbook.health.policy import Policy
from herdbook.projector.node_view import NodeView
from herdbook.reactors.gpu_health import (
    gpu_level,
    kept_gpus,
    next_gpus,
    report_gpus,
    same_map,
    with_gpus,
)
from herdbook.reactors.notifier_deciders import action_for
from tests.unit.test_classifier_hold import World

POLICY = Policy.load(None)
T0 = 1_800_000_000.0


def report(*events: GpuEvent) -> HealthReport:
    return HealthReport(report_id="r", node_id="n1", boot_id="b", events=events)


def view(world: World) -> NodeView:
    return world.projector.nodes["n1"]


# the pure parts ------------------------------------------------------------------------


def test_each_gpu_gets_its_worst_event_with_the_rule_kind_and_xid() -> None:
    verdict = POLICY.classify(report(GpuEvent(kind="xid", gpu=3, xid=48),
                                     GpuEvent(kind="thermal", gpu=3, value=88),
                                     GpuEvent(kind="nvlink", gpu=1, value=2),
                                     GpuEvent(kind="thermal", gpu=0, value=40)))
    gpus = report_gpus(verdict, T0)
    assert sorted(gpus) == [1, 3]          # GPU 0 is healthy: not named
    assert gpus[3] == GpuVerdict(level="critical", rule="critical-xid",
                                 reason="critical-xid: XID 48 on GPU 3", kind="xid", xid=48,
                                 since=T0, recommended_action="reset_gpu")
    assert (gpus[1].level, gpus[1].rule, gpus[1].kind, gpus[1].recommended_action) == (
        "degraded", "nvlink-errors", "nvlink", "none")


def test_critical_sticks_a_same_cause_keeps_its_time_and_conditions_clear() -> None:
    crit = GpuVerdict(level="critical", rule="critical-xid", kind="xid", xid=48, since=T0)
    warm = GpuVerdict(level="degraded", rule="thermal-warning", kind="thermal", since=T0)
    before = {3: crit, 2: warm}
    assert next_gpus(before, {}, node_unhealthy=True) == {3: crit}
    later = GpuVerdict(level="degraded", rule="thermal-warning", kind="thermal", since=T0 + 60)
    assert next_gpus(before, {2: later}, False)[2].since == T0      # the same: since kept
    hot = GpuVerdict(level="unhealthy", rule="thermal-critical", kind="thermal", since=T0 + 9)
    assert next_gpus({2: hot}, {}, node_unhealthy=True) == {2: hot}
    assert next_gpus({2: hot}, {}, node_unhealthy=False) == {}
    assert same_map({2: warm}, {2: later}) and not same_map({2: warm}, {2: hot})
    assert gpu_level(Health.UNKNOWN, {}, 0) == "unknown"
    assert gpu_level(Health.HEALTHY, {}, 0) == "healthy"
    assert gpu_level(Health.UNHEALTHY, before, 3) == "critical"


def test_a_map_that_changes_alone_is_one_gpus_only_change_first() -> None:
    warm = {2: GpuVerdict(level="degraded", rule="thermal-warning", kind="thermal", since=T0)}
    events = with_gpus({}, Health.DEGRADED, "n1", [], warm, "r9", 9)
    (only,) = events
    assert isinstance(only, NodeHealthChanged) and only.gpus_only
    assert (only.health, only.previous, only.gpus, only.report_seq) == (
        Health.DEGRADED, Health.DEGRADED, warm, 9)
    assert with_gpus(warm, Health.DEGRADED, "n1", [], warm) == []
    # the breaker held the node's change: the GPUs' verdicts are recorded all the same
    held = NodeHealthChanged(node_id="n1", health=Health.UNHEALTHY, gpus=warm)
    kept = kept_gpus({}, Health.HEALTHY, "n1", [held], [])
    assert [(e.health, e.gpus_only) for e in kept
            if isinstance(e, NodeHealthChanged)] == [(Health.HEALTHY, True)]


def test_the_event_field_round_trips_and_older_events_decode_without_it() -> None:
    event = NodeHealthChanged(node_id="n1", health=Health.UNHEALTHY, previous=Health.HEALTHY,
                              gpus={3: GpuVerdict(level="fatal", rule="gpu-lost", xid=79)})
    back = decode_event(encode(event))
    assert isinstance(back, NodeHealthChanged) and back.gpus == event.gpus
    old = decode_event(b'{"type":"node.health_changed","node_id":"n1","health":"DEGRADED"}')
    assert isinstance(old, NodeHealthChanged) and old.gpus == {} and not old.gpus_only


# the classifier, the decider and the fold together -------------------------------------


@pytest.mark.asyncio
async def test_a_critical_xid_names_its_gpu_in_the_view_until_uncordon() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="xid", gpu=3, xid=48)), T0)
    node = view(world)
    assert node.health is Health.UNHEALTHY
    assert node.gpus[3].level == "critical" and node.gpus[3].xid == 48
    assert node.gpus[3].since == T0 and node.gpus[3].rule == "critical-xid"
    assert gpu_level(node.health, node.gpus, 0) == "healthy"
    appended = len(world.store.appended)
    await world.send(report(), T0 + 60)                         # clean: it stays
    assert len(world.store.appended) == appended and view(world).gpus[3].level == "critical"
    world.store.fold(NodeUncordoned(node_id="n1"))
    assert view(world).gpus == {}
    assert gpu_level(view(world).health, view(world).gpus, 3) == "unknown"


@pytest.mark.asyncio
async def test_a_second_gpu_on_a_degraded_node_is_recorded_and_not_notified() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="nvlink", gpu=1, value=1)), T0)
    assert view(world).health is Health.DEGRADED
    reason = view(world).health_reason
    await world.send(report(GpuEvent(kind="thermal", gpu=2, value=88)), T0 + 30)
    node = view(world)
    assert node.health is Health.DEGRADED and node.health_reason == reason
    assert sorted(node.gpus) == [1, 2]
    assert node.gpus[1].kind == "nvlink" and node.gpus[1].since == T0   # held, since kept
    assert node.gpus[2].rule == "thermal-warning"
    last = world.changes()[-1]
    assert last.gpus_only and action_for(last) is None
    # the same fault on every report appends nothing more
    appended = len(world.store.appended)
    await world.send(report(GpuEvent(kind="thermal", gpu=2, value=89)), T0 + 60)
    assert len(world.store.appended) == appended


async def test_a_second_gpu_of_an_unhealthy_node_cordons_nothing_again() -> None:
    world = World().ready()
    await world.send(report(GpuEvent(kind="xid", gpu=3, xid=48)), T0)
    first = world.changes()[-1]
    assert first.health is Health.UNHEALTHY and action_for(first) == "cordon"
    await world.send(report(GpuEvent(kind="xid", gpu=1, xid=63)), T0 + 30)
    last = world.changes()[-1]
    assert last.gpus_only and last.health is Health.UNHEALTHY
    assert sorted(view(world).gpus) == [1, 3] and view(world).health_reason == first.reason
    assert action_for(last) is None       # the node was cordoned once, on its own change
