"""What to do, per fault (issue 29 item 4): every XID of the fatal table herdbook follows
and every health-event kind has an action of its own in the table; the verdict carries the
most disruptive action of its faults onto node.health_changed and each GPU's verdict; a
policy rule may name its own; an event written before the field decodes with none. Pure."""

from __future__ import annotations

import re

import msgspec
import pytest

from herdbook.events.codec import decode_event, encode
from herdbook.events.health_report import (
    HEALTH_EVENT_KINDS,
    GpuEvent,
    HealthReport,
    NodeHealthChanged,
)
from herdbook.events.node import NodeInfo
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.health.actions import (
    ACTIONS,
    KIND_ACTIONS,
    XID_ACTIONS,
    action_for,
    hint,
    worst,
)
from herdbook.health.default_policy import DEFAULT_POLICY_YAML
from herdbook.health.policy import Policy, PolicyError
from herdbook.projector.node_view import NodeView
from herdbook.reactors.gpu_health import report_gpus
from herdbook.reactors.health import decide_health
from tests.unit.test_fatal_xids import REFERENCE

POLICY = Policy.load(None)


def test_every_xid_of_the_fatal_table_and_of_the_default_policy_has_its_own_action() -> None:
    in_policy = {int(x) for line in re.findall(r"event\.xid (?:==|in) \[?([\d, ]+)\]?",
                                               DEFAULT_POLICY_YAML)
                 for x in line.split(",")}
    assert {43, 48, 63, 79, 13, 31, 45, 64, 92, 94} <= in_policy
    for xid in {x for x, *_ in REFERENCE} | in_policy:
        assert xid in XID_ACTIONS, f"XID {xid} has no action in the table"
        assert XID_ACTIONS[xid] in ACTIONS


def test_every_fault_kind_has_its_own_action() -> None:
    for kind in HEALTH_EVENT_KINDS:
        if kind != "xid":
            assert kind in KIND_ACTIONS, f"kind {kind} has no action in the table"
    assert set(KIND_ACTIONS.values()) <= set(ACTIONS)


@pytest.mark.parametrize(("event", "action"), [
    (GpuEvent(kind="xid", gpu=3, xid=79), "reboot_node"),
    (GpuEvent(kind="xid", gpu=1, xid=48), "reset_gpu"),
    (GpuEvent(kind="xid", gpu=1, xid=13), "restart_workload"),
    (GpuEvent(kind="xid", gpu=1, xid=43), "restart_workload"),
    (GpuEvent(kind="ecc_dbe", gpu=0, value=1), "reset_gpu"),
    (GpuEvent(kind="thermal", gpu=0, value=96), "inspect_hardware"),
    (GpuEvent(kind="nvlink", gpu=0, value=2), "none"),
    (GpuEvent(kind="sxid", xid=24007, fatal=True), "reboot_node"),
])
def test_a_verdict_carries_its_fault_action(event: GpuEvent, action: str) -> None:
    report = HealthReport(report_id="r", node_id="n", boot_id="b", events=(event,))
    assert POLICY.classify(report).action == action


def test_the_most_disruptive_action_of_a_report_wins_and_healthy_is_none() -> None:
    report = HealthReport(report_id="r", node_id="n", boot_id="b", events=(
        GpuEvent(kind="xid", gpu=1, xid=13), GpuEvent(kind="xid", gpu=2, xid=79),
        GpuEvent(kind="thermal", gpu=0, value=40)))
    verdict = POLICY.classify(report)
    assert verdict.action == "reboot_node"
    gpus = report_gpus(verdict, 0.0)
    assert (gpus[1].recommended_action, gpus[2].recommended_action) == (
        "restart_workload", "reboot_node")
    assert worst([]) == "none" and worst(["none", "inspect_hardware", "reset_gpu"]) == \
        "inspect_hardware"
    clean = HealthReport(report_id="r", node_id="n", boot_id="b",
                         events=(GpuEvent(kind="thermal", gpu=0, value=40),))
    assert POLICY.classify(clean).action == "none"


def test_repeated_recoverable_xids_and_a_gpu_pulled_twice_are_for_a_person() -> None:
    assert action_for("xid", 13) == "restart_workload"
    rules = {rule.name: rule.action for rule in POLICY.rules}
    assert rules["repeated-xid"] == rules["gpu-pulled-twice"] == "inspect_hardware"


def test_a_policy_rule_names_its_own_action_and_a_bad_one_is_refused() -> None:
    policy = Policy.parse("version: 1\nrules:\n  - name: x\n    condition: event.kind == "
                          "\"xid\"\n    result: critical\n    action: reboot_node\n")
    report = HealthReport(report_id="r", node_id="n", boot_id="b",
                          events=(GpuEvent(kind="xid", gpu=0, xid=13),))
    assert policy.classify(report).action == "reboot_node"
    with pytest.raises(PolicyError, match="rule 'x': action 'reboot' is not one of none, "
                                          "restart_workload"):
        Policy.parse("version: 1\nrules:\n  - name: x\n    condition: 'true'\n"
                     "    result: critical\n    action: reboot\n")


def ready() -> NodeView:
    return NodeView(id="gpu-1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=Health.HEALTHY, version=4,
                    info=NodeInfo(instance_id="i-1"))


def test_node_health_changed_carries_the_action_and_old_events_have_none() -> None:
    report = HealthReport(report_id="r", node_id="gpu-1", boot_id="b",
                          events=(GpuEvent(kind="xid", gpu=2, xid=79),))
    events, _ = decide_health(ready(), POLICY.classify(report), 0, 2, "r", 7)
    changed = next(e for e in events if isinstance(e, NodeHealthChanged))
    assert changed.recommended_action == "reboot_node"
    again = decode_event(encode(changed))
    assert isinstance(again, NodeHealthChanged) and again.recommended_action == "reboot_node"
    old = msgspec.json.decode(encode(changed))
    del old["recommended_action"]
    before = decode_event(msgspec.json.encode(old))
    assert isinstance(before, NodeHealthChanged) and before.recommended_action is None


def test_the_hint_offers_herd_node_reboot_for_a_reboot() -> None:
    assert hint("reboot_node", "gpu-1") == ("recommended: reboot the node: "
                                            "herd node reboot gpu-1")
    assert hint("inspect_hardware", "gpu-1") == "recommended: inspect the hardware"
