"""What the simulator can do to one node, agent or lightweight alike."""

from __future__ import annotations

from typing import Protocol


class SimError(RuntimeError):
    """An action that cannot be done now (e.g. stop a node that is stopped)."""


class SimNode(Protocol):
    node_id: str
    partitioned: bool

    @property
    def running(self) -> bool: ...

    async def start(self, gpus: int | None = None) -> None: ...
    async def stop(self) -> None: ...
    def partition(self, on: bool) -> None: ...
    async def inject(self, fault: str, gpu: int, value: float | None) -> str: ...
