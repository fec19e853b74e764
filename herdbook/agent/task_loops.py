"""The agent's background tasks: a call repeated every interval whatever one call does,
and a cancel that is repeated until every task has really ended."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)


async def cancel_until_done(tasks: list[asyncio.Task[Any]], again: float = 0.5) -> None:
    """Cancel ``tasks`` and wait until each has ended, cancelling again every ``again``
    seconds one still running. On Python 3.11 ``asyncio.wait_for`` (in nats-py's requests,
    in loops here) returns what it waited for when a cancel lands just as that completes:
    the cancel is lost, the loop around it runs on, and an agent waiting for it never
    stopped (seen under load). The agent's tasks have nothing to finish once cancelled."""
    for task in tasks:
        task.cancel()
    pending = set(tasks)
    while pending:
        _, pending = await asyncio.wait(pending, timeout=again)
        for task in pending:
            log.debug("task %s did not stop when cancelled: cancelling it again",
                      task.get_name())
            task.cancel()


async def every(interval: float | Callable[[], float], fn: Callable[[], Awaitable[Any]],
                first: bool = True) -> None:
    """Call ``fn`` every ``interval`` seconds (from one start to the next; a callable is
    asked each time); a failed call is logged and the next one comes on time."""
    seconds = interval if callable(interval) else lambda: interval
    if not first:
        await asyncio.sleep(seconds())
    while True:
        started = time.monotonic()
        try:
            await fn()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - one failed tick is not fatal
            log.warning("%s failed: %s", getattr(fn, "__name__", "task"), err)
        await asyncio.sleep(max(0.0, seconds() - (time.monotonic() - started)))
