"""When each node is next due for a liveness decision: timers only (Nomad's
``heartbeat.go``), no clock and no I/O.

A heap with lazy re-arming: a heartbeat never touches the heap unless the node has no
entry; a popped entry whose node heartbeated since is pushed again at its new deadline
by whoever evaluates it. An earlier deadline supersedes a later one, whose entry is
skipped when it pops. No tick scans every node.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class Deadlines:
    def __init__(self) -> None:
        self.heap: list[tuple[float, str]] = []
        self.armed: dict[str, float] = {}
        """Per node, its earliest deadline in the heap."""

    def push(self, deadline: float, node_id: str) -> None:
        """Due at ``deadline``, unless it is already due no later."""
        armed = self.armed.get(node_id)
        if armed is not None and armed <= deadline:
            return
        self.armed[node_id] = deadline
        heapq.heappush(self.heap, (deadline, node_id))

    def due(self, now: float) -> Iterator[str]:
        """Pop every node due at ``now``, each disarmed as it is yielded; what is pushed
        meanwhile is popped too if it is due."""
        heap = self.heap
        while heap and heap[0][0] <= now:
            deadline, node_id = heapq.heappop(heap)
            if self.armed.get(node_id) != deadline:
                continue  # superseded by an earlier entry
            del self.armed[node_id]
            yield node_id

    def forget(self, node_id: str) -> None:
        """Its entries stay in the heap until they pop, and are skipped then."""
        self.armed.pop(node_id, None)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.armed

    def __len__(self) -> int:
        return len(self.heap)
