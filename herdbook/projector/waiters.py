"""Read-your-writes: who waits for which sequence to be committed to the view.

The projector releases them after each commit (``release``) and asks ``first`` after
each run it folds, so a commit is kicked as soon as the lowest awaited sequence is
folded, never a batch window later.
"""

from __future__ import annotations

import asyncio


class Waiters:
    def __init__(self) -> None:
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []
        self.first = float("inf")
        """The lowest sequence someone waits for (``inf``: nobody)."""

    def add(self, seq: int) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((seq, fut))
        self.first = min(self.first, seq)
        return fut

    def release(self, committed: int) -> None:
        """Wake everyone waiting for ``committed`` or less; forget who gave up."""
        keep = []
        for seq, fut in self._waiting:
            if seq <= committed:
                if not fut.done():
                    fut.set_result(None)
            elif not fut.done():
                keep.append((seq, fut))
        self._waiting = keep
        self.first = min((seq for seq, _ in keep), default=float("inf"))
