"""The one unit-test world of the write side (cosmicpython's fake unit of work, shared):
an in-memory store and projector (tests/fakes.py), a clock moved by hand, and the ONE
decide runner over them, as ``control/bootstrap.py`` builds it for a real plane. A
reactor under test takes ``world.runner`` and ``world.clock`` (both required arguments);
what it decided is in ``world.store.appended``, stamped with the clock's time and the ids
``id0001``, ``id0002``, ... in the order they were drawn.

``context()`` is the same time and ids for a decider called without a runner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count
from typing import Any

from herdbook.config import Config
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.reactors.decide_runner import ATTEMPTS, Context, DecideRunner
from herdbook.reactors.sweeper import Sweeper
from tests.fakes import FakeClock, FakeProjector, FakeStore

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def numbered_ids() -> Callable[[], str]:
    """``id0001``, ``id0002``, ...: ids a test can name, in the order they are drawn."""
    ids = count(1)
    return lambda: f"id{next(ids):04d}"


def context(now: datetime = T0) -> Context:
    return Context(now=now, new_id=numbered_ids())


class World:
    def __init__(self, epoch: datetime = T0, *, attempts: int = ATTEMPTS) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        self.clock = FakeClock(epoch)
        self.model = self.projector.model
        self.runner = DecideRunner(self.store, self.projector, self.clock,
                                   ids=numbered_ids(), attempts=attempts)

    def node(self, node_id: str, gpus: int = 0, **info: Any) -> None:
        """A node registered, approved and boot-checked (schedulable once healthy)."""
        nodeinfo = NodeInfo(gpus=tuple(GpuInfo(index=i, uuid=f"{node_id}-{i}", name="H100")
                                       for i in range(gpus)), **info)
        for event in (NodeRegistered(node_id=node_id, boot_id="b", info=nodeinfo),
                      NodeApproved(node_id=node_id),
                      NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
            self.store.fold(event)

    def appended(self, kind: type) -> list[tuple[Any, int | None]]:
        """What the runner appended of ``kind``, with the version each expected."""
        return [(e, v) for e, v in self.store.appended if isinstance(e, kind)]

    def names(self) -> list[str]:
        return [e.event_name for e, _ in self.store.appended]


class SweeperWorld(World):
    """The liveness sweeper over the one runner (tests/unit/test_sweeper_*.py), with no
    NATS: heartbeats go to ``sweeper.accept``; ``at(t)`` moves the clock to ``t`` seconds,
    sweeps and lets the appends run."""

    def __init__(self, config: Config, *, follow_the_view: bool = True, nc: Any = None) -> None:
        super().__init__()
        self.nc = nc
        self.sweeper = Sweeper(nc, self.store, self.projector, config,  # type: ignore[arg-type]
                               clock=self.clock, runner=self.runner)
        if follow_the_view:   # as start() does: the view's changes reach the sweeper
            self.projector.nodes.subscribe(self.sweeper._on_view_change)

    def ready(self, node_id: str = "n1", boot_id: str = "b", **info: Any) -> None:
        """A node registered and boot-checked: its silence is timed from now."""
        self.store.fold(NodeRegistered(node_id=node_id, boot_id=boot_id, info=NodeInfo(**info)))
        self.store.fold(NodeBootChecked(node_id=node_id, boot_id=boot_id, passed=True))

    async def at(self, t: float) -> None:
        self.clock.seconds = t
        self.sweeper.sweep()
        for _ in range(5):
            await asyncio.sleep(0)
