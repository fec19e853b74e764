"""The one unit-test world of the write side (cosmicpython's fake unit of work, shared):
an in-memory store and projector (tests/fakes.py), a clock moved by hand, and the ONE
decide runner over them, as ``control/bootstrap.py`` builds it for a real plane. A
reactor under test takes ``world.runner`` and ``world.clock`` (both required arguments);
what it decided is in ``world.store.appended``, stamped with the clock's time and the ids
``id0001``, ``id0002``, ... in the order they were drawn.

``context()`` is the same time and ids for a decider called without a runner."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count
from typing import Any

from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.reactors.decide_runner import ATTEMPTS, Context, DecideRunner
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
