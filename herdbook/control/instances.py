"""The instance manager: runs the pool reconciler every ``reconcile_interval`` and carries
out its plan through the providers, recording every step as an instance event.

One control plane should run it (two replicas would each provision for a short pool);
every append still uses optimistic concurrency per instance and per node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from herdbook.backoff import Backoff
from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.control.providers import InstanceSpec, Provider, ProviderError
from herdbook.events.breaker_events import HeldAction
from herdbook.events.instance import InstanceEvent
from herdbook.events.node import NodeEvent
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker_deciders import Gate
from herdbook.reactors.decide_runner import Appended, DecideRunner, Decision
from herdbook.reactors.pool_deciders import (
    decide_drain_first,
    decide_failed,
    decide_node_terminated,
    decide_provision_failed,
    decide_provisioned,
    decide_provisioning,
    decide_running,
    decide_terminate_error,
    decide_terminated,
    decide_terminating,
    plan_pool,
)
from herdbook.reactors.sweeper import Sweeper

log = logging.getLogger(__name__)
PROVISION_RETRY = Backoff(5.0, cap=300.0)
"""A pool whose provider refused: provisioned again after 5 s, 10, 20 ... 5 min."""


class InstanceManager:
    def __init__(self, config: Config, projector: ProjectorRunner, sweeper: Sweeper,
                 providers: dict[str, Provider], *, clock: Clock, runner: DecideRunner,
                 gate: Gate | None = None) -> None:
        self.config = config
        self.gate = gate
        """The circuit breaker (``reactors/breaker.py``): auto-replacements it holds."""
        self.runner = runner
        self.clock = clock
        self.projector = projector
        self.sweeper = sweeper
        self.providers = providers
        self._task: asyncio.Task[None] | None = None
        self._busy: set[str] = set()      # instances with a provider call in flight
        self._inspect_said: set[str] = set()
        """Nodes left to a person (``PoolPlan.inspect``) whose warning was logged."""
        self._last_stale_check = -float("inf")
        self._tasks: set[asyncio.Task[None]] = set()
        # After a provider error a pool waits before provisioning again (doubling, 5s..5m),
        # so a broken provider is not called in a loop.
        self._retry_at: dict[str, float] = {}
        self._retry_delay: dict[str, float] = {}

    def start(self) -> None:
        if self.config.pools:
            self._task = asyncio.create_task(self._loop(), name="instance-manager")

    async def stop(self) -> None:
        for task in [*([self._task] if self._task else []), *self._tasks]:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - shutting down
                pass

    async def _loop(self) -> None:
        interval = float(self.config.instance_manager.reconcile_interval)
        while True:
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reconcile failed")
            await asyncio.sleep(interval)

    def _busy_nodes(self) -> dict[str, bool]:
        """Nodes that run allocations and are reachable: they are drained first."""
        out = {}
        for node_id, beat in self.sweeper.beats.items():
            view = self.projector.nodes.get(node_id)
            age = self.sweeper.heartbeat_age(node_id)
            out[node_id] = (bool(beat.running_allocs) and view is not None and age is not None
                            and age < self.sweeper.timeouts(view).heartbeat_timeout)
        return out

    async def reconcile(self) -> None:
        now = self.clock.now()
        busy = self._busy_nodes()
        # Registration timeouts are checked every stale_check_interval (Navarch).
        stale_check = (self.clock.monotonic() - self._last_stale_check
                       >= float(self.config.instance_manager.stale_check_interval))
        if stale_check:
            self._last_stale_check = self.clock.monotonic()
        timeout = (float(self.config.instance_manager.registration_timeout) if stale_check
                   else float("inf"))
        # said once per fault: forgotten once an operator cleared it (or the node is gone)
        self._inspect_said = {n for n in self._inspect_said
                              if (v := self.projector.nodes.get(n)) is not None
                              and v.health_action == "inspect_hardware"}
        for name, pool in self.config.pools.items():
            instances = [i for i in self.projector.instances.values()
                         if i.pool == name and i.id not in self._busy]
            plan = plan_pool(pool, self.projector.pool_sizes.get(name), instances,
                             self.projector.nodes, busy, now, timeout,
                             None if self.gate is None else partial(self._replace_held, now=now))
            for node_id in plan.held:
                await self._on_node(node_id, partial(self._hold_replace, now=now))
            for node_id in plan.inspect:
                if node_id not in self._inspect_said:   # once per node, not per reconcile
                    self._inspect_said.add(node_id)
                    log.warning("pool %s: node %s not auto-replaced: its verdict asks to "
                                "inspect the hardware (health.replace_on_hardware_fault)",
                                name, node_id)

            for instance_id in plan.running:
                await self._on_instance(instance_id, decide_running)
            for instance_id, reason in plan.fail:
                await self._on_instance(instance_id, partial(decide_failed, reason=reason))
                self._spawn(self._terminate(instance_id, f"failed: {reason}", fail=True))
            for node_id in plan.drain:
                await self._on_node(node_id, decide_drain_first)
            for instance_id, reason in plan.terminate:
                self._spawn(self._terminate(instance_id, reason))
            if self.clock.monotonic() < self._retry_at.get(name, 0.0):
                continue
            for i in range(plan.provision):
                replaces = plan.replace[i] if i < len(plan.replace) else None
                self._spawn(self._provision(name, replaces))

    def _replace_held(self, view: NodeView, now: datetime) -> bool:
        assert self.gate is not None
        return self.gate(now)(view, HeldAction.REPLACE, "replace") is not None

    def _hold_replace(self, view: NodeView | None, now: datetime) -> Decision[NodeEvent] | None:
        """``node.action_held`` once per node until a reset (the gate decides again, as of
        the reconcile's ``now`` that planned the hold)."""
        if view is None or self.gate is None:
            return None
        events = self.gate(now)(view, HeldAction.REPLACE,
                                f"replace: unhealthy: {view.health_reason}")
        return Decision(view.version, events) if events else None

    async def _on_instance(self, instance_id: str, decide: Callable[
            [InstanceView | None], Decision[InstanceEvent] | None]) -> Appended[InstanceEvent]:
        """Decide on the instance as the view holds it now (again after a conflict)."""
        return await self.runner.run("instance", instance_id, lambda _: decide(
            self.projector.instances.get(instance_id)))

    async def _on_node(self, node_id: str, decide: Callable[
            [NodeView | None], Decision[NodeEvent] | None]) -> Appended[NodeEvent]:
        return await self.runner.run("node", node_id, lambda _: decide(
            self.projector.nodes.get(node_id)))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _provision(self, pool_name: str, replaces: str | None) -> None:
        pool = self.config.pools[pool_name]
        instance_id = f"{pool_name}-{self.runner.ids()[:8]}"
        self._busy.add(instance_id)
        try:
            await self.runner.run("instance", instance_id, lambda _: decide_provisioning(
                instance_id, pool_name, pool, replaces))
            spec = InstanceSpec(instance_id=instance_id, node_id=instance_id, pool=pool_name,
                                node_class=pool.node_class, labels=dict(pool.labels),
                                fake_gpus=pool.fake_gpus,
                                heartbeat_interval=float(pool.heartbeat_interval),
                                agent_command=pool.agent_command)
            try:
                ref = await self.providers[pool.provider].provision(spec)
            except ProviderError as err:
                delay = PROVISION_RETRY.next(self._retry_delay.get(pool_name))
                self._retry_delay[pool_name] = delay
                self._retry_at[pool_name] = self.clock.monotonic() + delay
                await self._on_instance(instance_id,
                                        partial(decide_provision_failed, error=str(err)))
                return
            self._retry_delay.pop(pool_name, None)
            await self._on_instance(instance_id, partial(decide_provisioned, ref=ref))
        finally:
            self._busy.discard(instance_id)

    async def _terminate(self, instance_id: str, reason: str, fail: bool = False) -> None:
        inst = self.projector.instances.get(instance_id)
        if inst is None or instance_id in self._busy:
            return
        self._busy.add(instance_id)
        try:
            if not fail:
                done = await self._on_instance(instance_id,
                                               partial(decide_terminating, reason=reason))
                if not done.events:
                    return    # it moved on meanwhile: the next round decides again
            try:
                await self.providers[inst.provider].terminate(instance_id, inst.provider_ref)
            except ProviderError as err:
                await self._on_instance(instance_id,
                                        partial(decide_terminate_error, error=str(err)))
                return
            if not fail:
                await self._on_instance(instance_id, partial(decide_terminated, reason=reason))
            await self._on_node(inst.node_id, partial(
                decide_node_terminated, instance_id=instance_id, reason=reason))
        finally:
            self._busy.discard(instance_id)
