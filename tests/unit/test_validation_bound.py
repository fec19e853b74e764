"""validation.max_concurrent: turning the gate on (or a rack coming back) must not take
every due node out at once. The pure decider holds a due node while the bound's slots
are taken; the reactor starts the waiting nodes, first come first, as slots free."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from herdbook.config import ConfigError, ValidationConfig, parse_config
from herdbook.events.alloc import AllocCompleted
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeDown,
    NodeInfo,
    NodeRegistered,
)
from herdbook.reactors.decide_runner import Context, DecideRunner
from herdbook.reactors.validation import ValidationReactor
from herdbook.reactors.validation_deciders import decide_due, held_by_bound
from tests.fakes import FakeClock, FakeProjector, FakeStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def ctx() -> Context:
    ids = iter(f"id{n:030d}" for n in range(1000))
    return Context(now=T0, new_id=lambda: next(ids))


def gate(bound: int | str) -> ValidationConfig:
    return ValidationConfig(name="burn-in", command=["burn-in"], max_concurrent=bound)


def test_the_default_bound_is_a_tenth_of_the_fleet_rounded_up_at_least_one() -> None:
    check = parse_config(b"validation: {command: [burn-in]}", "f").validation
    assert check.max_concurrent == "10%"
    assert [check.concurrency(n) for n in (0, 1, 9, 10, 11, 100, 1000)] == [
        1, 1, 1, 1, 2, 10, 100]
    assert gate(3).concurrency(1000) == 3
    assert gate("25%").concurrency(10) == 3
    assert gate(0).concurrency(1000) is None           # 0: no bound


@pytest.mark.parametrize("bad", ["-1", "ten", "0%", "101%", "10 %x", "1.5"])
def test_a_bad_bound_is_refused_at_load(bad: str) -> None:
    with pytest.raises(ConfigError, match="validation.max_concurrent"):
        parse_config(f"validation: {{command: [x], max_concurrent: {bad}}}".encode(), "f")


def due_node(store: FakeStore, node_id: str) -> None:
    info = NodeInfo(cpus=8, gpus=(GpuInfo(index=0, uuid=f"{node_id}-0", name="H100"),))
    for event in (NodeRegistered(node_id=node_id, boot_id="b", info=info),
                  NodeApproved(node_id=node_id),
                  NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
        store.fold(event)


def test_the_decider_holds_a_due_node_while_every_slot_runs() -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    due_node(store, "n1")
    view = projector.nodes["n1"]
    assert view.validation_due == "approved"
    # 20 nodes at 10%: 2 slots
    assert held_by_bound(gate("10%"), 2, 20) and not held_by_bound(gate("10%"), 1, 20)
    assert decide_due(view, gate("10%"), ctx(), running=2, fleet=20) is None
    started = decide_due(view, gate("10%"), ctx(), running=1, fleet=20)
    assert started is not None and started.events[0].event_name == "validation_started"
    assert decide_due(view, gate(0), ctx(), running=500, fleet=20) is not None


async def settled(reactor: ValidationReactor) -> None:
    for _ in range(200):          # the reactor's queue, drained by its task
        await asyncio.sleep(0)
        if reactor._queue.empty():
            await asyncio.sleep(0)
            if reactor._queue.empty():
                return


async def test_the_reactor_starts_waiting_nodes_as_slots_free_first_come_first() -> None:
    projector = FakeProjector()
    store = FakeStore(projector)
    config = parse_config(b"validation: {command: [burn-in], max_concurrent: 2, "
                          b"when: [approved]}", "f")
    for n in range(1, 6):
        due_node(store, f"n{n}")
    clock = FakeClock(T0)
    reactor = ValidationReactor(projector, config, clock=clock,  # type: ignore[arg-type]
                                runner=DecideRunner(store, projector, clock))  # type: ignore[arg-type]
    reactor.start()
    try:
        await settled(reactor)

        def validating() -> list[str]:
            return sorted(i for i, v in projector.nodes.items() if v.validation == "running")

        assert validating() == ["n1", "n2"]
        assert [a.node_id for a in projector.allocs.values()] == ["n1", "n2"]
        # n1's check passes: one slot, n3 (the first that waited) takes it
        store.fold(AllocCompleted(node_id="n1", alloc_id=projector.nodes["n1"].validation_alloc))
        await settled(reactor)
        assert projector.nodes["n1"].validation == "passed"
        assert validating() == ["n2", "n3"]
        # a waiting node that went DOWN meanwhile does not keep its turn: n5 gets n2's slot
        store.fold(NodeDown(node_id="n4", reason="missed heartbeats"))
        store.fold(AllocCompleted(node_id="n2", alloc_id=projector.nodes["n2"].validation_alloc))
        await settled(reactor)
        assert validating() == ["n3", "n5"]
        assert projector.nodes["n4"].validation == ""
    finally:
        await reactor.stop()
