"""The instance manager through the decide runner, with a fake provider: given a pool
and its past events, when a reconcile round, then these instance and node events."""

from __future__ import annotations

import asyncio

from herdbook.config import parse_config
from herdbook.control.instances import InstanceManager
from herdbook.control.providers import InstanceSpec, ProviderError
from herdbook.events.instance import InstanceProviderError
from herdbook.events.node import NodeInfo, NodeRegistered
from herdbook.events.pool import PoolScaled
from herdbook.events.states import InstanceState, Lifecycle
from herdbook.reactors import liveness
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.heartbeats import NodeBeat
from herdbook.reactors.pool_deciders import decide_provisioned, decide_running, decide_terminating
from tests.fakes import FakeClock, FakeProjector, FakeStore

CONFIG = parse_config(b"""
pools: {p: {provider: fake, min_nodes: 1, max_nodes: 3}}
instance_manager: {registration_timeout: 5m, stale_check_interval: 1m}
""")


class FakeProvider:
    name = "fake"

    def __init__(self) -> None:
        self.provisioned: list[InstanceSpec] = []
        self.terminated: list[tuple[str, str]] = []
        self.broken = False

    async def provision(self, spec: InstanceSpec) -> str:
        if self.broken:
            raise ProviderError("quota exceeded")
        self.provisioned.append(spec)
        return f"ref-{spec.instance_id}"

    async def terminate(self, instance_id: str, provider_ref: str) -> None:
        self.terminated.append((instance_id, provider_ref))

    async def list(self) -> list[str]:
        return []


class FakeSweeper:
    """What the instance manager reads of the sweeper: no node runs anything."""

    def __init__(self) -> None:
        self.beats: dict[str, NodeBeat] = {}

    def heartbeat_age(self, node_id: str) -> float | None:
        return None

    def timeouts(self, view: object) -> liveness.Timeouts:
        return liveness.Timeouts(30.0, 60.0)


class World:
    def __init__(self) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock()
        self.provider = FakeProvider()
        self.manager = InstanceManager(CONFIG, self.projector,  # type: ignore[arg-type]
                                       FakeSweeper(), {"fake": self.provider},  # type: ignore[arg-type,dict-item]
                                       clock=self.clock, runner=DecideRunner(
                                           self.store, self.projector, self.clock))  # type: ignore[arg-type]

    async def reconcile(self) -> None:
        await self.manager.reconcile()
        for _ in range(10):
            await asyncio.sleep(0)

    def names(self) -> list[str]:
        return [e.event_name for e, _ in self.store.appended]

    def only_instance(self) -> str:
        [instance_id] = self.projector.instances
        return instance_id


async def test_a_short_pool_is_provisioned() -> None:
    world = World()
    await world.reconcile()
    assert world.names() == ["provisioning", "provisioned"]
    instance_id = world.only_instance()
    assert instance_id.startswith("p-")
    [spec] = world.provider.provisioned
    assert spec.instance_id == instance_id
    inst = world.projector.instances[instance_id]
    assert inst.state is InstanceState.PENDING_REGISTRATION
    assert inst.created_at == world.clock.now()
    # and the next round provisions nothing more: the instance counts
    await world.reconcile()
    assert len(world.provider.provisioned) == 1


async def test_a_provider_error_fails_the_instance_and_backs_off() -> None:
    world = World()
    world.provider.broken = True
    await world.reconcile()
    assert world.names() == ["provisioning", "provider_error", "failed"]
    # the pool waits before it asks the provider again
    await world.reconcile()
    assert world.names().count("provisioning") == 1
    world.provider.broken = False
    world.clock.advance(5.1)
    await world.reconcile()
    assert world.names().count("provisioning") == 2
    assert len(world.provider.provisioned) == 1


async def test_a_registered_agent_makes_its_instance_running_after_a_race() -> None:
    world = World()
    await world.reconcile()
    instance_id = world.only_instance()
    world.store.fold(NodeRegistered(node_id=instance_id, boot_id="b",
                                    info=NodeInfo(instance_id=instance_id)))
    # given another writer's event on the instance lands between decision and append
    world.store.race(InstanceProviderError(instance_id=instance_id, operation="list",
                                           reason="x"))
    await world.reconcile()
    running = [(e, v) for e, v in world.store.appended if e.event_name == "running"]
    [(event, expected)] = running
    assert expected == world.store.seq - 1      # decided again after the other event
    assert world.projector.instances[instance_id].state is InstanceState.RUNNING


async def test_an_instance_that_never_registers_is_failed_and_released() -> None:
    world = World()
    await world.reconcile()
    instance_id = world.only_instance()
    world.clock.advance(301.0)
    await world.reconcile()
    assert world.projector.instances[instance_id].state is InstanceState.FAILED
    assert world.provider.terminated == [(instance_id, f"ref-{instance_id}")]
    # and a successor is provisioned
    assert world.names().count("provisioning") == 2


async def test_scale_down_terminates_the_instance_and_its_node() -> None:
    world = World()
    await world.reconcile()
    instance_id = world.only_instance()
    world.store.fold(NodeRegistered(node_id=instance_id, boot_id="b",
                                    info=NodeInfo(instance_id=instance_id)))
    await world.reconcile()
    # when the pool is scaled to zero
    world.manager.config = parse_config(b"pools: {p: {provider: fake, max_nodes: 3}}")
    world.store.fold(PoolScaled(pool="p", size=0))
    await world.reconcile()
    assert world.names()[-3:] == ["terminating", "terminated", "terminated"]
    assert world.projector.instances[instance_id].state is InstanceState.TERMINATED
    assert world.projector.nodes[instance_id].lifecycle is Lifecycle.TERMINATED


def test_a_step_whose_instance_is_gone_decides_nothing() -> None:
    assert decide_running(None) is None
    assert decide_provisioned(None, "ref") is None
    assert decide_terminating(None, "scale down") is None
