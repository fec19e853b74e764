"""How a long-running herd process (`herd up`, `herd agent`, `herd sim`) stops: within 2 s
of SIGTERM or SIGINT, whatever NATS is doing (DESIGN §9).

The first signal sets the process's stop event: the graceful path (state written,
subscriptions closed). A connect that retries forever, a drain towards a SIGSTOPped
server or any other await that does not return is not waited for: ``grace`` seconds
after the signal the main task is cancelled, and if the process still runs at
``deadline`` seconds (its loop blocked, or a ``finally`` stuck on the network) it
exits at once with one line on stderr. A second signal cancels at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

STOP_GRACE = 1.2
STOP_DEADLINE = 1.8
EXIT_FORCED = 1


def stop_on_signals(stop: asyncio.Event, *, grace: float = STOP_GRACE,
                    deadline: float = STOP_DEADLINE) -> None:
    """Install the SIGTERM/SIGINT handlers for the running loop's current task."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def cancel() -> None:
        if not task.done():
            task.cancel()

    def force_exit() -> None:
        sys.stderr.write(f"herd: did not stop within {deadline:g}s of the signal; exiting\n")
        sys.stderr.flush()
        os._exit(EXIT_FORCED)

    def on_signal() -> None:
        if stop.is_set():
            cancel()
            return
        stop.set()
        loop.call_later(grace, cancel)
        timer = threading.Timer(deadline, force_exit)
        timer.daemon = True    # a normal exit before the deadline does not wait for it
        timer.start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)


def stopped_by_signal(stop: asyncio.Event, err: BaseException) -> bool:
    """Whether ``err`` (raised out of the main task) is the cancellation a signal asked
    for, i.e. a stop and not a failure."""
    return isinstance(err, asyncio.CancelledError) and stop.is_set()


async def until_signalled(work: Awaitable[T]) -> T | None:
    """Await ``work`` as the process's main task; SIGTERM/SIGINT end it as above, and
    then this returns None instead of its result."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        return await work
    except asyncio.CancelledError as err:
        if stopped_by_signal(stop, err):
            return None
        raise
