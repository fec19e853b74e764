"""Each node's last heartbeat time in one contiguous array (issue 32 item 3).

Why: ``/v1/fleet`` writes every node's heartbeat age on each request. Read from the
intake's per-node records (``NodeBeat``: the object, its attribute dict, its boot id, its
float), that is four scattered objects per node; at 100k nodes in a 1.9 GB heap each is a
cache miss the 1k fleet never pays, and the reply cost 1.5-2x more per node. Here the
times sit side by side in an ``array('d')``, indexed by a slot that stays the node's
until it is forgotten, written by the intake as it records a heartbeat (one dict lookup
and one store per heartbeat) and read by the fleet in one sequential pass.
"""

from __future__ import annotations

from array import array

NO_HEARTBEAT = float("nan")
"""A slot whose node has no heartbeat of a boot yet (or a freed slot)."""


class SeenColumn:
    """``times[slots[node]]``: when the node's last counted heartbeat arrived (the control
    plane's monotonic clock); ``generation`` changes whenever a slot is given or freed,
    so a reader rebuilds its order only then."""

    __slots__ = ("_free", "generation", "slots", "times")

    def __init__(self) -> None:
        self.times = array("d")
        self.slots: dict[str, int] = {}
        self._free: list[int] = []
        self.generation = 0

    def add(self, node_id: str) -> int:
        """The node's slot, given now (the caller writes its time)."""
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self.times)
            self.times.append(NO_HEARTBEAT)
        self.slots[node_id] = slot
        self.generation += 1
        return slot

    def set(self, node_id: str, seen: float) -> None:
        """Record ``seen`` for the node (the intake inlines this on its hot path)."""
        slot = self.slots.get(node_id)
        self.times[self.add(node_id) if slot is None else slot] = seen

    def drop(self, node_id: str) -> None:
        """The node is forgotten: its slot is free for another."""
        slot = self.slots.pop(node_id, None)
        if slot is not None:
            self.times[slot] = NO_HEARTBEAT
            self._free.append(slot)
            self.generation += 1
