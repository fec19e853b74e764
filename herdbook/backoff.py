"""How long to wait before the next try: one value type for every retry loop.

Each site names its own constants (``Backoff(0.5, cap=10.0)``) where it retries; the
arithmetic lives here once. A delay is the previous one times ``factor`` plus ``step``,
at most ``cap``: ``factor=2`` doubles (1, 2, 4 ...), ``factor=1, step=s`` adds (s, 2s, 3s
...: a short pause that grows slowly, where a retry is expected to land soon).

Pure: it never sleeps and reads no clock; the caller waits (``asyncio.sleep``, a stop
event, a deadline on its own clock).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    first: float
    """The delay before the first retry."""
    factor: float = 2.0
    step: float = 0.0
    cap: float = math.inf

    def __post_init__(self) -> None:
        if self.first < 0 or self.factor < 1 or self.step < 0 or self.cap < 0:
            raise ValueError(f"a backoff never shrinks and never goes negative: {self}")

    def next(self, delay: float | None = None) -> float:
        """The delay after ``delay``; None: the first."""
        if delay is None:
            return min(self.first, self.cap)
        return min(delay * self.factor + self.step, self.cap)

    def delays(self) -> Iterator[float]:
        """The delays before each retry, in order, without end."""
        delay = self.next()
        while True:
            yield delay
            delay = self.next(delay)

    def nth(self, attempt: int) -> float:
        """The delay after failed attempt ``attempt`` (0: the first try failed), for a
        loop that counts its attempts."""
        delay = self.next()
        for _ in range(attempt):
            if delay >= self.cap:
                break
            delay = self.next(delay)
        return delay
