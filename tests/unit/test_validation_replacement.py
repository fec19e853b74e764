"""What a failed validation recommends, and a replacement's node: given a node's past
events, when its check fails, then its recommended action is ``inspect_hardware`` (so a
bare-metal pool's auto-replace leaves it to a person instead of looping); given a
replacement instance, when its node registers, then it is due as ``returned``."""

from __future__ import annotations

from msgspec.structs import replace

from herdbook.config import parse_config
from herdbook.events.alloc import AllocStatus
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.instance import InstanceProvisioning
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeInfo,
    NodeRegistered,
    NodeUncordoned,
    NodeValidationDue,
    NodeValidationFailed,
)
from herdbook.events.states import Health, InstanceState
from herdbook.health.actions import action_for
from herdbook.projector.instance_view import InstanceView
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.pool_deciders import plan_pool
from herdbook.reactors.validation import ValidationReactor
from herdbook.reactors.validation_deciders import decide_due, decide_result, decide_successor
from tests.fakes import FakeClock, FakeProjector, FakeStore
from tests.unit.test_validation import CHECK, alloc, ctx, fold, ready, started, then
from tests.unit.test_validation_bound import settled

RETURNED_ONLY = replace(CHECK, when=["returned"])


def test_a_failed_check_recommends_inspecting_the_hardware() -> None:
    view = then(ready(), NodeHealthChanged(node_id="g1", health=Health.UNHEALTHY,
                                           reason="XID 79", recommended_action="reboot_node"))
    view = then(view, NodeUncordoned(node_id="g1", actor="op"))   # clears the verdict's action
    assert view.health_action == ""
    view = started(view)
    decision = decide_result(view, alloc(view, AllocStatus.FAILED, 1, "GPU 3: Fail"), CHECK,
                             ctx())
    assert decision is not None
    [failed] = decision.events
    assert isinstance(failed, NodeValidationFailed)
    assert failed.recommended_action == "inspect_hardware" == action_for(
        "check", name="validation")
    after = then(view, failed)
    assert (after.health, after.health_action) == (Health.UNHEALTHY, "inspect_hardware")


def test_a_bare_metal_pool_does_not_replace_a_node_that_failed_its_check() -> None:
    view = started(ready())
    decision = decide_result(view, alloc(view, AllocStatus.FAILED, 1), CHECK, ctx())
    assert decision is not None
    failed = then(view, decision.events[0])
    instance = InstanceView(id="i1", pool="p", provider="local", node_id="g1",
                            state=InstanceState.RUNNING, created_at=ctx().now)
    failed = replace(failed, info=NodeInfo(instance_id="i1"))
    config = parse_config(b"pools: {p: {provider: local, min_nodes: 1, max_nodes: 1,"
                          b" health: {auto_replace: true}}}")
    plan = plan_pool(config.pools["p"], None, [instance], {"g1": failed}, {}, ctx().now, 600)
    assert plan.inspect == ["g1"] and plan.replace == []
    cloud = replace(config.pools["p"], provider="fake")
    assert plan_pool(cloud, None, [instance], {"g1": failed}, {}, ctx().now, 600).replace \
        == ["g1"]


def successor(replaces: str | None = "gpu-7") -> InstanceView:
    return InstanceView(id="p-1", pool="p", provider="fake", node_id="g1",
                        state=InstanceState.PENDING_REGISTRATION, replaces=replaces)


def test_a_replacements_node_is_due_as_returned_from_its_registration() -> None:
    registered = fold(NodeRegistered(node_id="g1", boot_id="b1",
                                     info=NodeInfo(instance_id="p-1")))
    decision = decide_successor(registered, successor(), RETURNED_ONLY)
    assert decision is not None and decision.expected == registered.version
    [due] = decision.events
    assert isinstance(due, NodeValidationDue)
    assert (due.trigger, due.reason) == ("returned", "replaces gpu-7")
    view = then(registered, due)
    # approval keeps it returned, so `when: [returned]` validates it before any work
    for event in (NodeApproved(node_id="g1"),
                  NodeBootChecked(node_id="g1", boot_id="b1", passed=True)):
        view = then(view, event)
    assert view.validation_due == "returned" and view.state == "READY"
    start = decide_due(view, RETURNED_ONLY, ctx())
    assert start is not None
    assert start.events[0].trigger == "returned"  # type: ignore[attr-defined]
    assert decide_successor(view, successor(), RETURNED_ONLY) is None   # once


def test_only_a_replacement_never_validated_is_marked() -> None:
    view = fold(NodeRegistered(node_id="g1", boot_id="b1"))
    assert decide_successor(view, successor(replaces=None), RETURNED_ONLY) is None   # scale-up
    assert decide_successor(view, successor(), None) is None                         # no gate
    assert decide_successor(view, successor(), replace(CHECK, when=["approved"])) is None
    assert decide_successor(view, replace(successor(), node_id="other"), RETURNED_ONLY) is None
    assert decide_successor(replace(view, validation="passed"), successor(),
                            RETURNED_ONLY) is None
    # without the mark, first approval alone is `approved`: `when: [returned]` skips it
    plain = ready()
    assert plain.validation_due == "approved" and decide_due(plain, RETURNED_ONLY, ctx()) is None


async def test_the_reactor_marks_a_replacements_node_when_it_registers() -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    config = parse_config(b"validation: {command: [burn-in], when: [returned]}", "f")
    store.fold(InstanceProvisioning(instance_id="p-1", pool="p", provider="fake",
                                    node_id="g1", replaces="gpu-7"))
    store.fold(InstanceProvisioning(instance_id="p-2", pool="p", provider="fake",
                                    node_id="g2"))     # a scale-up: nothing to prove
    clock = FakeClock(ctx().now)
    reactor = ValidationReactor(projector, config, clock=clock,  # type: ignore[arg-type]
                                runner=DecideRunner(store, projector, clock))  # type: ignore[arg-type]
    reactor.start()
    try:
        for node_id, instance in (("g1", "p-1"), ("g2", "p-2")):
            store.fold(NodeRegistered(node_id=node_id, boot_id="b1",
                                      info=NodeInfo(instance_id=instance)))
        await settled(reactor)
        assert projector.nodes["g1"].validation_due == "returned"
        assert projector.nodes["g2"].validation_due == ""
        for node_id in ("g1", "g2"):
            store.fold(NodeApproved(node_id=node_id))
            store.fold(NodeBootChecked(node_id=node_id, boot_id="b1", passed=True))
        await settled(reactor)
        assert projector.nodes["g1"].state == "VALIDATING"
        assert projector.nodes["g2"].state == "READY"       # `approved` is not in `when`
    finally:
        await reactor.stop()
