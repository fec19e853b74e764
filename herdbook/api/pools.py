"""``pool.*`` and ``instance.*``: the pools of the config and what their providers run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from herdbook.api.caller import caller
from herdbook.api.deciders import decide_scale_pool
from herdbook.api.lookup import ApiError, decode, resolve
from herdbook.api.messages import ById, InstanceReply, ListInstances, Page, PoolByName, ScalePool
from herdbook.api.present import instance_reply
from herdbook.config import Config
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.pool_deciders import LIVE
from herdbook.reactors.refused import AlreadyDone

Handler = Callable[[bytes], Awaitable[Any]]


class PoolRoutes:
    def __init__(self, projector: ProjectorRunner, runner: DecideRunner, config: Config) -> None:
        self.projector = projector
        self.runner = runner
        self.config = config

    def routes(self) -> dict[str, Handler]:
        return {"instance.list": self.instance_list, "instance.describe": self.instance_describe,
                "pool.list": self.pool_list, "pool.status": self.pool_status,
                "pool.scale": self.pool_scale}

    async def instance_list(self, data: bytes) -> Page[InstanceReply]:
        req = decode(data, ListInstances, empty=True)
        items = [instance_reply(i) for _, i in sorted(self.projector.instances.items())
                 if not req.pool or i.pool == req.pool]
        return Page(items=items)

    async def instance_describe(self, data: bytes) -> InstanceReply:
        req = decode(data, ById)
        return instance_reply(resolve(self.projector.instances, req.id, "instance"))

    def pool_json(self, name: str) -> dict[str, Any]:
        pool = self.config.pools[name]
        instances = [i for i in self.projector.instances.values() if i.pool == name]
        by_state = Counter(inst.state.value for inst in instances)
        nodes = [self.projector.nodes[i.node_id] for i in instances
                 if i.state in LIVE and i.node_id in self.projector.nodes]
        desired = self.projector.pool_sizes.get(name)
        return {"name": name, "provider": pool.provider, "min_nodes": pool.min_nodes,
                "max_nodes": pool.max_nodes, "desired": desired,
                "target": max(pool.min_nodes, min(pool.max_nodes,
                                                  pool.min_nodes if desired is None else desired)),
                "live": sum(by_state.get(s.value, 0) for s in LIVE),
                "instances": dict(by_state),
                "nodes_by_state": dict(Counter(n.state for n in nodes)),
                "auto_replace": pool.health.auto_replace, "class": pool.node_class,
                "labels": dict(pool.labels)}

    async def pool_list(self, data: bytes) -> Page[dict[str, Any]]:
        return Page(items=[self.pool_json(name) for name in sorted(self.config.pools)])

    async def pool_status(self, data: bytes) -> dict[str, Any]:
        req = decode(data, PoolByName)
        if req.pool not in self.config.pools:
            raise ApiError("not_found", f"pool {req.pool} not found")
        return self.pool_json(req.pool)

    async def pool_scale(self, data: bytes) -> dict[str, Any]:
        """A blind write (see ``decide_scale_pool``): the runner's ``append_blind``, stamped
        by its clock and ids like every decided event."""
        req = decode(data, ScalePool)
        try:
            event = decide_scale_pool(self.config.pools.get(req.pool), req.pool, req.size,
                                      actor=caller(req), reason=req.reason,
                                      desired=self.projector.pool_sizes.get(req.pool))
        except AlreadyDone as done:   # that size already: a success, nothing appended
            return {**self.pool_json(req.pool), "unchanged": str(done)}
        await self.runner.append_blind([event])
        return self.pool_json(req.pool)
