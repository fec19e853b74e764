"""The one clock: wall time for what is recorded, monotonic time for what is waited.

``bootstrap`` builds one and hands it to every part; tests hand a ``FakeClock`` (in
``tests/fakes.py``) and move it by hand. Nothing else reads ``datetime.now`` or
``time.monotonic`` to decide.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """Wall time, UTC: what an event records as its ``at``."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back: deadlines, ages, backoff."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()
