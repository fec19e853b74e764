"""One workload the executor runs: its record in ``agent-state.json``, the event its end
sets, and how it is stopped (the stop sequence of ``alloc.stop_requested``)."""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

from herdbook.agent import procs
from herdbook.agent.workload_state import StateEntry
from herdbook.events.alloc import AllocStopRequested

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Workload:
    entry: StateEntry
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    stopper: asyncio.Task[None] | None = None
    killed: bool = False
    lost: bool = False
    """The control plane wrote it off (``alloc.lost``): killed, its end not reported."""

    async def stop_sequence(self, stop: AllocStopRequested) -> None:
        """``signal``; after ``grace_s`` SIGTERM; after ``kill_timeout_s`` more SIGKILL.
        When ``signal`` is SIGTERM itself, SIGKILL follows ``grace_s + kill_timeout_s``."""
        pgid = self.entry.pgid
        first = procs.parse_signal(stop.signal)
        if first is None:
            log.warning("%s: unknown stop signal %r; sending SIGTERM", self.entry.alloc_id,
                        stop.signal)
            first = signal.SIGTERM
        procs.signal_group(pgid, first)
        wait = stop.grace_s + stop.kill_timeout_s
        if first is not signal.SIGTERM:
            if await self.exits_within(stop.grace_s):
                return
            procs.signal_group(pgid, signal.SIGTERM)
            wait = stop.kill_timeout_s
        if not await self.exits_within(wait):
            log.warning("%s: still running after SIGTERM; killing", self.entry.alloc_id)
            self.kill()

    async def exits_within(self, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self.exited.wait(), max(0.0, seconds))
        except TimeoutError:
            return self.exited.is_set()
        return True

    def kill(self) -> None:
        self.killed = True
        procs.signal_group(self.entry.pgid, signal.SIGKILL)
