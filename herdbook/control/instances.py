"""The instance manager: runs the pool reconciler every ``reconcile_interval`` and carries
out its plan through the providers, recording every step as an instance event.

One control plane should run it (two replicas would each provision for a short pool);
every append still uses optimistic concurrency per instance and per node.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from herdbook.config import Config
from herdbook.control.providers import InstanceSpec, Provider, ProviderError
from herdbook.events.instance import (
    InstanceFailed,
    InstanceProviderError,
    InstanceProvisioned,
    InstanceProvisioning,
    InstanceRunning,
    InstanceTerminated,
    InstanceTerminating,
)
from herdbook.events.node import NodeDrainStarted, NodeTerminated
from herdbook.events.states import Lifecycle, NodeClass
from herdbook.events.store import ConflictError, EventStore
from herdbook.projector.runner import ProjectorRunner
from herdbook.reactors.pools import plan_pool
from herdbook.reactors.sweeper import Sweeper

log = logging.getLogger(__name__)
ACTOR = "instance-manager"


class InstanceManager:
    def __init__(self, config: Config, store: EventStore, projector: ProjectorRunner,
                 sweeper: Sweeper, providers: dict[str, Provider]) -> None:
        self.config = config
        self.store = store
        self.projector = projector
        self.sweeper = sweeper
        self.providers = providers
        self._task: asyncio.Task[None] | None = None
        self._busy: set[str] = set()      # instances with a provider call in flight
        self._last_stale_check = 0.0
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
        now = datetime.now(UTC)
        busy = self._busy_nodes()
        # Registration timeouts are checked every stale_check_interval (Navarch).
        stale_check = (time.monotonic() - self._last_stale_check
                       >= float(self.config.instance_manager.stale_check_interval))
        if stale_check:
            self._last_stale_check = time.monotonic()
        timeout = (float(self.config.instance_manager.registration_timeout) if stale_check
                   else float("inf"))
        for name, pool in self.config.pools.items():
            instances = [i for i in self.projector.instances.values()
                         if i.pool == name and i.id not in self._busy]
            plan = plan_pool(pool, self.projector.pool_sizes.get(name), instances,
                             self.projector.nodes, busy, now, timeout)
            for instance_id in plan.running:
                inst = self.projector.instances[instance_id]
                await self._append(InstanceRunning(instance_id=instance_id, actor=ACTOR,
                                                   node_id=inst.node_id), inst.version)
            for instance_id, reason in plan.fail:
                inst = self.projector.instances[instance_id]
                await self._append(InstanceFailed(instance_id=instance_id, actor=ACTOR,
                                                  reason=reason), inst.version)
                self._spawn(self._terminate(instance_id, f"failed: {reason}", fail=True))
            for node_id in plan.drain:
                view = self.projector.nodes.get(node_id)
                if view is not None:
                    await self._append(NodeDrainStarted(
                        node_id=node_id, actor=ACTOR,
                        reason="drained before its instance is terminated"), view.version)
            for instance_id, reason in plan.terminate:
                self._spawn(self._terminate(instance_id, reason))
            if time.monotonic() < self._retry_at.get(name, 0.0):
                continue
            for i in range(plan.provision):
                replaces = plan.replace[i] if i < len(plan.replace) else None
                self._spawn(self._provision(name, replaces))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _append(self, event: Any, expected: int) -> int | None:
        try:
            return await self.store.append(event, expected_version=expected)
        except ConflictError:
            return None    # someone moved first; the next round decides again

    async def _provision(self, pool_name: str, replaces: str | None) -> None:
        pool = self.config.pools[pool_name]
        instance_id = f"{pool_name}-{uuid.uuid4().hex[:8]}"
        self._busy.add(instance_id)
        try:
            reason = f"replaces {replaces}" if replaces else "pool below its target size"
            seq = await self.store.append(InstanceProvisioning(
                instance_id=instance_id, pool=pool_name, provider=pool.provider,
                node_id=instance_id, node_class=NodeClass(pool.node_class),
                labels=dict(pool.labels),
                reason=reason, replaces=replaces, actor=ACTOR), expected_version=0)
            spec = InstanceSpec(instance_id=instance_id, node_id=instance_id, pool=pool_name,
                                node_class=pool.node_class, labels=dict(pool.labels),
                                fake_gpus=pool.fake_gpus,
                                heartbeat_interval=float(pool.heartbeat_interval),
                                agent_command=pool.agent_command)
            try:
                ref = await self.providers[pool.provider].provision(spec)
            except ProviderError as err:
                delay = min(300.0, self._retry_delay.get(pool_name, 2.5) * 2)
                self._retry_delay[pool_name] = delay
                self._retry_at[pool_name] = time.monotonic() + delay
                seq = await self.store.append(InstanceProviderError(
                    instance_id=instance_id, operation="provision", reason=str(err),
                    actor=ACTOR), expected_version=seq)
                await self.store.append(InstanceFailed(
                    instance_id=instance_id, reason=f"provisioning failed: {err}", actor=ACTOR),
                    expected_version=seq)
                return
            self._retry_delay.pop(pool_name, None)
            seq = await self.store.append(InstanceProvisioned(
                instance_id=instance_id, provider_ref=ref, actor=ACTOR), expected_version=seq)
            await self.projector.wait_applied(seq)
        finally:
            self._busy.discard(instance_id)

    async def _terminate(self, instance_id: str, reason: str, fail: bool = False) -> None:
        inst = self.projector.instances.get(instance_id)
        if inst is None or instance_id in self._busy:
            return
        self._busy.add(instance_id)
        try:
            seq: int | None = inst.version
            if not fail:
                seq = await self._append(InstanceTerminating(
                    instance_id=instance_id, reason=reason, actor=ACTOR), inst.version)
                if seq is None:
                    return
            try:
                await self.providers[inst.provider].terminate(instance_id, inst.provider_ref)
            except ProviderError as err:
                await self.store.append(InstanceProviderError(
                    instance_id=instance_id, operation="terminate", reason=str(err),
                    actor=ACTOR))
                return
            if not fail:
                seq = await self.store.append(InstanceTerminated(
                    instance_id=instance_id, reason=reason, actor=ACTOR))
            node = self.projector.nodes.get(inst.node_id)
            if node is not None and node.lifecycle is not Lifecycle.TERMINATED:
                seq = await self._append(NodeTerminated(
                    node_id=node.id, instance_id=instance_id, actor=ACTOR,
                    reason=f"instance {instance_id} terminated: {reason}"), node.version)
            if seq:
                await self.projector.wait_applied(seq)
        finally:
            self._busy.discard(instance_id)

