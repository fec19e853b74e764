"""Python's garbage collector while the projector catches up (and while a plan is made):
young objects collected less often, the heap found on entering frozen.

An object, not module state: each ``ProjectorRunner`` owns one (``runner.gc``) and the
scheduler that plans against that projector borrows it, so one plane's holders share a
count. The collector itself is the process's: two planes in one process (tests, the
benchmarks) hold two of these, and leaving one never undoes the other's thresholds
(``hold`` restores only what it set itself, and only while they are still in force).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

CATCH_UP_GC_GEN0 = 50_000
"""Python's young-generation GC threshold while catching up (700 by default): a fold
makes and drops a few tracked objects per event, and collecting them every 700 was
8-11 % of a rebuild (and of its limit). Restored once caught up."""


class CatchUpGc:
    """Holders of the raised thresholds and the frozen heap, counted."""

    def __init__(self, gen0: int = CATCH_UP_GC_GEN0) -> None:
        self.gen0 = gen0
        self._holders = 0
        self._saved: tuple[int, ...] = ()   # the thresholds the first holder found
        self._raised: tuple[int, ...] = ()  # what it set them to
        self._frozen = False

    @property
    def holders(self) -> int:
        return self._holders

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Inside: young objects collected every ``gen0`` allocations, not every 700, and
        the heap found on entering frozen (``gc.freeze``: a full collection does not walk
        it; 125-175 ms each at 10,000 nodes, several in a large plan). Holders may overlap
        (a catch-up, plans): the first one in freezes and unfreezes when it leaves, so
        the heap is frozen at most as long as one holder runs, never for as long as
        holders keep overlapping; the thresholds come back once the last one leaves. The
        benchmark's limit (decode + fold in memory) runs inside it too."""
        if self._holders == 0:
            self._saved = gc.get_threshold()
            self._raised = (max(self.gen0, self._saved[0]), *self._saved[1:])
            gc.set_threshold(*self._raised)
        froze = not self._frozen
        if froze:
            gc.freeze()
            self._frozen = True
        self._holders += 1
        try:
            yield
        finally:
            self._holders -= 1
            if froze:
                gc.unfreeze()
                self._frozen = False
            # Another owner in this process may have restored (or raised) them since:
            # put back what was found only over what this one set.
            if self._holders == 0 and gc.get_threshold() == self._raised:
                gc.set_threshold(*self._saved)

    def refreeze(self) -> None:
        """Inside ``hold``: freeze what was made since entering it too (a rebuild's view),
        so that the collections while its last commit encodes every row walk only the
        young objects (10k nodes' rows: 35 ms, against ~50 without); ``hold`` unfreezes
        it with the rest when its freezer leaves. Outside, nothing."""
        if self._frozen:
            gc.freeze()
