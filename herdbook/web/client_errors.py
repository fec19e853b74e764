"""What aiohttp's request handler logs with, so that a client's malformed request is one
line now and then, not an ERROR with a traceback each time.

aiohttp answers a request it cannot parse (a request line or header over 8 KiB, a bad
method, a broken chunk) with 400 before any of herdbook's handlers or auth runs, and
logs it with ``logger.exception``: anyone who can reach the port could fill the log with
tracebacks, each echoing up to 8 KiB of what they sent. Here such an error (an
``HttpProcessingError``) is a WARNING of one line (the peer, the error's class and
status, never the bytes sent), then counted and said again at most once a minute with
the count. Anything else aiohttp logs (a handler that raised) goes to its own logger
as before."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.log import server_logger

from herdbook.clock import Clock

log = logging.getLogger(__name__)

EVERY = 60.0
"""Seconds between two lines about malformed requests."""


class ClientErrorLog:
    """A stand-in for ``aiohttp.log.server_logger`` (``AppRunner(logger=…)``)."""

    def __init__(self, clock: Clock, every: float = EVERY) -> None:
        self.clock = clock
        self.every = every
        self.unsaid = 0
        """Malformed requests since the last line."""
        self._said_at: float | None = None

    def exception(self, msg: str, *args: Any, exc_info: Any = None, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.client_error(str(args[0]) if args else "?", exc_info)
        else:
            server_logger.exception(msg, *args, exc_info=exc_info, **kwargs)

    def client_error(self, peer: str, err: HttpProcessingError) -> None:
        now = self.clock.monotonic()
        if self._said_at is not None and now - self._said_at < self.every:
            self.unsaid += 1
            return
        more = (f"; {self.unsaid} more since the last line" if self.unsaid else "")
        log.warning("HTTP: a malformed request from %s answered %d (%s)%s; the next are "
                    "counted for %.0f s", peer, err.code, type(err).__name__, more, self.every)
        self._said_at, self.unsaid = now, 0

    def __getattr__(self, name: str) -> Any:   # debug, warning, … as aiohttp's logger
        return getattr(server_logger, name)
