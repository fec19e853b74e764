"""Fatal XIDs as the health-monitoring reference says (issue 16): given a READY, HEALTHY
node, when one report carries an XID, then the built-in policy and the health decider
make it UNHEALTHY at once (critical: 43, 48, 63; fatal: 79, also DOWN) or DEGRADED
(recoverable: 13, 31, 45, 64, 92, 94); and one report is enough for the pool
reconciler to replace the node where auto-replace is on. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from herdbook.config import parse_config
from herdbook.events.health_report import GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import NodeDown, NodeEvent, NodeInfo
from herdbook.events.states import Approval, Health, InstanceState, Lifecycle, NodeType
from herdbook.health.policy import Policy
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.health import decide_health
from herdbook.reactors.pool_deciders import plan_pool

POLICY = Policy.load(None)
THRESHOLD = 2

# every XID of the reference: (code, what it is, health after one report, DOWN too)
REFERENCE = [
    (43, "GPU stopped processing", Health.UNHEALTHY, False),
    (48, "Double bit ECC error", Health.UNHEALTHY, False),
    (63, "ECC page retirement", Health.UNHEALTHY, False),
    (79, "GPU has fallen off the bus", Health.UNHEALTHY, True),
    (13, "Graphics engine exception", Health.DEGRADED, False),
    (31, "GPU memory page fault", Health.DEGRADED, False),
    (45, "Preemptive cleanup", Health.DEGRADED, False),
    (64, "ECC page retirement event", Health.DEGRADED, False),
    (92, "High single-bit ECC rate", Health.DEGRADED, False),
    (94, "Contained ECC error", Health.DEGRADED, False),
]


def ready_node() -> NodeView:
    return NodeView(id="gpu-1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=Health.HEALTHY, version=4,
                    info=NodeInfo(instance_id="i-1"))


def one_report(xid: int) -> list[NodeEvent]:
    report = HealthReport(report_id="r-1", node_id="gpu-1", boot_id="b",
                          events=(GpuEvent(kind="xid", gpu=2, xid=xid),))
    events, _ = decide_health(ready_node(), POLICY.classify(report), 0, THRESHOLD, "r-1", 7)
    return events


@pytest.mark.parametrize(("xid", "what", "health", "down"), REFERENCE,
                         ids=[f"xid-{x}" for x, *_ in REFERENCE])
def test_one_report_of_an_xid_decides_as_the_reference_says(xid: int, what: str,
                                                            health: Health,
                                                            down: bool) -> None:
    events = one_report(xid)
    changed = events[0]
    assert isinstance(changed, NodeHealthChanged), what
    assert changed.health is health
    assert f"XID {xid} on GPU 2" in changed.reason
    # critical is not fatal (issue 26): the level on the wire, fatal only with DOWN
    level = "degraded" if health is Health.DEGRADED else "fatal" if down else "critical"
    assert (changed.level, changed.fatal) == (level, down)
    if health is Health.UNHEALTHY:
        assert changed.reason.startswith(f"{level}: ")
    assert changed.report_seq == 7
    assert [type(e) for e in events[1:]] == ([NodeDown] if down else [])
    if down:   # the cause chain: report -> UNHEALTHY -> DOWN
        assert events[1].causation_id == changed.event_id


def test_an_xid_outside_the_reference_changes_nothing() -> None:
    assert one_report(999) == []


def fold(view: NodeView, events: list[NodeEvent]) -> NodeView:
    for seq, event in enumerate(events, start=view.version + 1):
        folded = apply(view, event, seq)   # type: ignore[arg-type]
        assert folded is not None
        view = folded
    return view


@pytest.mark.parametrize("xid", [43, 48, 63, 79])
def test_one_fatal_xid_is_enough_for_auto_replacement(xid: int) -> None:
    pool = parse_config(b"pools: {p: {min_nodes: 1, max_nodes: 2, cooldown: 5m,"
                        b" health: {auto_replace: true}}}").pools["p"]
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    instance = InstanceView(id="i-1", pool="p", provider="fake", node_id="gpu-1",
                            state=InstanceState.RUNNING, created_at=now - timedelta(hours=1),
                            state_at=now - timedelta(hours=1))
    before = plan_pool(pool, None, [instance], {"gpu-1": ready_node()}, {}, now, 600)
    assert before.replace == []
    after = fold(ready_node(), one_report(xid))
    assert after.health is Health.UNHEALTHY
    plan = plan_pool(pool, None, [instance], {"gpu-1": after}, {}, now, 600)
    assert plan.replace == ["gpu-1"] and plan.provision == 1
    assert [iid for iid, _ in plan.terminate] == ["i-1"]


EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("name", ["policy-herdbook.yaml", "policy-navarch.yaml"])
def test_both_example_policies_classify_the_reference_xids_alike(name: str) -> None:
    policy = Policy.load(EXAMPLES / name)
    for xid, what, health, _ in REFERENCE:
        verdict = policy.classify(HealthReport(report_id="r", node_id="n", boot_id="b",
                                               events=(GpuEvent(kind="xid", xid=xid),)))
        assert verdict.at_once is (health is Health.UNHEALTHY), (name, xid, what)
        assert (verdict.result == "degraded") is (health is Health.DEGRADED), (name, xid)
