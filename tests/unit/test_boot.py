"""Boot: the agent's boot check and retries, the boot timeout and DRAINED deciders."""

from __future__ import annotations

from pathlib import Path

import msgspec

from herdbook.agent.fake_nvml import FakeNvml
from herdbook.agent.main import Agent, AgentOptions
from herdbook.events.node import NodeBootChecked, NodeDrained, NodeFailed, NodeRegistered
from herdbook.events.states import Approval, Intent, Lifecycle, NodeType
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors import liveness


class BrokenNvml(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise RuntimeError("NVML: driver not loaded")


class RecordingStore:
    def __init__(self) -> None:
        self.events: list[object] = []

    async def append(self, event: object, expected_version: int | None = None) -> int:
        self.events.append(event)
        return len(self.events)


async def test_a_failing_boot_check_is_reported_three_times_and_the_node_fails(
        tmp_path: Path) -> None:
    agent = Agent(AgentOptions(node_id="gpu-1", state_dir=str(tmp_path), boot_retry_interval=0),
                  nvml=BrokenNvml(count=2))
    store = RecordingStore()
    await agent._boot_checks(store)  # type: ignore[arg-type]
    checks = [e for e in store.events if isinstance(e, NodeBootChecked)]
    assert [c.passed for c in checks] == [False, False, False]
    assert "driver not loaded" in checks[0].checks["nvml"]
    # folded after a registration, the third failure is FAILED
    view = apply(None, NodeRegistered(node_id="gpu-1"), 1)
    for seq, check in enumerate(checks, start=2):
        view = apply(view, check, seq)  # type: ignore[arg-type]
    assert view is not None and view.lifecycle is Lifecycle.FAILED


async def test_a_passing_boot_check_is_reported_once(tmp_path: Path) -> None:
    agent = Agent(AgentOptions(node_id="gpu-1", state_dir=str(tmp_path)), nvml=FakeNvml(count=2))
    agent.state.write_sentinel("gpu-1", "e", "h", gpus=2)
    store = RecordingStore()
    await agent._boot_checks(store)  # type: ignore[arg-type]
    [check] = store.events
    assert isinstance(check, NodeBootChecked) and check.passed
    assert check.checks == {"nvml": "ok", "gpu_count": "ok", "state_dir": "ok"}


async def test_a_missing_gpu_fails_the_boot_check(tmp_path: Path) -> None:
    agent = Agent(AgentOptions(node_id="gpu-1", state_dir=str(tmp_path), boot_attempts=1),
                  nvml=FakeNvml(count=7))
    agent.state.write_sentinel("gpu-1", "e", "h", gpus=8)
    store = RecordingStore()
    await agent._boot_checks(store)  # type: ignore[arg-type]
    [check] = store.events
    assert isinstance(check, NodeBootChecked) and not check.passed
    assert check.checks["gpu_count"] == "found 7 GPUs, expected 8"


def node(**kw: object) -> NodeView:
    base = NodeView(id="gpu-1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, version=4)
    return msgspec.structs.replace(base, **kw)


TIMEOUTS = liveness.Timeouts(heartbeat_timeout=30, grace_period=60, boot_timeout=600)


def test_booting_longer_than_the_boot_timeout_fails() -> None:
    booting = node(lifecycle=Lifecycle.BOOTING)
    seen = liveness.Observation(heartbeat_age=1.0, boot_id="b", booting_for=599.0)
    assert liveness.decide(booting, seen, TIMEOUTS) == []
    seen = liveness.Observation(heartbeat_age=1.0, boot_id="b", booting_for=600.0)
    [event] = liveness.decide(booting, seen, TIMEOUTS)
    assert isinstance(event, NodeFailed) and "boot timeout" in event.reason
    assert liveness.next_deadline(booting, 0.0, TIMEOUTS, booting_since=100.0) == 700.0


def test_draining_becomes_drained_when_no_allocation_runs() -> None:
    draining = node(intent=Intent.DRAINING)
    busy = liveness.Observation(heartbeat_age=1.0, boot_id="b", running_allocs=2)
    idle = liveness.Observation(heartbeat_age=1.0, boot_id="b", running_allocs=0)
    silent = liveness.Observation(heartbeat_age=40.0, boot_id="b", running_allocs=0)
    assert liveness.decide(draining, busy, TIMEOUTS) == []
    assert [type(e) for e in liveness.decide(draining, idle, TIMEOUTS)] == [NodeDrained]
    # a node we do not hear from is not known to be idle
    assert NodeDrained not in [type(e) for e in liveness.decide(draining, silent, TIMEOUTS)]
