"""Dead letters of every reader of a stream (the projector, the sweeper, the classifier).

A message that does not decode, or that its subject does not vouch for, is republished
to ``herd.deadletter.<stream>`` with its subject and the reason in headers, and counted.
It is logged at most once a second with the count of those not logged: a flood of
garbage must not become a flood of log. Subjects and reasons are escaped and cut, since
both come from whoever published.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.events.subjects import deadletter_subject, printable

log = logging.getLogger(__name__)


class DeadLetters:
    def __init__(self, nc: NATS, stream: str, *, clock: Callable[[], float],
                 log_every: float = 1.0, logger: logging.Logger = log) -> None:
        """``logger``: the reader's own, so a line says who met the message. ``clock``:
        monotonic seconds, for how often a line is logged."""
        self.nc = nc
        self.log = logger
        self.stream = stream
        self.log_every = log_every
        self.clock = clock
        self.count = 0
        self._logged_at = -math.inf
        self._logged_count = 0

    async def send(self, msg: Msg, reason: str, seq: int | None = None) -> None:
        """Count, maybe log, and republish ``msg``; ``seq``: its stream sequence, if known."""
        self.count += 1
        subject = printable(msg.subject, 120)
        now = self.clock()
        if now - self._logged_at >= self.log_every:
            unlogged = self.count - self._logged_count - 1
            self.log.warning("dead-lettered a message of %s on %s%s: %s%s", self.stream,
                             subject, f" seq {seq}" if seq is not None else "",
                             printable(reason), f" (and {unlogged} more since the last line)"
                             if unlogged else "")
            self._logged_at = now
            self._logged_count = self.count
        headers = {"Herd-Subject": printable(msg.subject, 1000), "Herd-Error": printable(reason)}
        if seq is not None:
            headers["Herd-Stream-Seq"] = str(seq)
        try:
            await self.nc.publish(deadletter_subject(self.stream), msg.data or b"",
                                  headers=headers)
        except Exception as err:  # noqa: BLE001 - disconnected: it is counted all the same
            log.debug("dead letter not published: %s", err)
