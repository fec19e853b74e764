"""Where a reactor that acts on the outside world stands in HERD_EVENTS: what it may commit
(``Progress``, pure) and the node events after a committed position (``node_events``,
read from the log with the feed every reader uses).

The committed position is a low-water mark: every sequence at or before it was acted on,
or called for nothing. Actions run side by side (one slow webhook does not hold another
node's), so the mark stays below the oldest action still running; one that finishes
later moves it past everything finished meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.authority import bind_event
from herdbook.events.codec import AnyEvent
from herdbook.events.feed import StreamFeed, stream_seq
from herdbook.events.subjects import EVENTS_STREAM

log = logging.getLogger(__name__)

NODE_EVENTS = "herd.node.>"


class Progress:
    """The sequences seen and the actions still running, from a committed ``position``."""

    def __init__(self, position: int) -> None:
        self.through = position
        """The last sequence seen (acted on, being acted on, or calling for nothing)."""
        self._running: set[int] = set()

    def see(self, seq: int) -> bool:
        """Sequence ``seq`` arrives: False if it was seen already (a redelivery, the
        catch-up and the live changes overlapping), else it counts as seen."""
        if seq <= self.through:
            return False
        self.through = seq
        return True

    def begin(self, seq: int) -> None:
        """An action on ``seq`` (seen) starts: the mark stays below it until it ends."""
        self._running.add(seq)

    def end(self, seq: int) -> None:
        """The action on ``seq`` is done (delivered, or its failure recorded)."""
        self._running.discard(seq)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def committable(self) -> int:
        """Every sequence at or before this one was acted on or called for nothing."""
        return min(self._running) - 1 if self._running else self.through


async def node_events(nc: NATS, after: int, through: int,
                      on_event: Callable[[int, AnyEvent], None]) -> None:
    """Call ``on_event(seq, event)`` for every node event stored after ``after`` up to
    ``through``, in order. What the subject does not vouch for is left out (the projector
    dead-letters it and folds nothing)."""
    if through <= after:
        return
    reached = asyncio.Event()

    async def on_msg(msg: Msg) -> None:
        seq = stream_seq(msg)
        if seq > through:
            reached.set()
            return
        try:
            event = bind_event(msg.subject, msg.data)
        except Exception:  # noqa: BLE001 - unvouched or undecodable: not folded either
            pass
        else:
            on_event(seq, event)
        if seq >= through:
            reached.set()

    feed = StreamFeed(nc, EVENTS_STREAM, NODE_EVENTS, after + 1, on_msg, batch=500)
    await feed.start()
    try:
        # The last node event may come before ``through`` (a job's event there): the
        # feed's end says so.
        done = [asyncio.create_task(reached.wait()), asyncio.create_task(feed.caught_up.wait())]
        try:
            await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in done:
                task.cancel()
    finally:
        await feed.stop()
