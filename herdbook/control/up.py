"""``herd up``: the control plane of a config, run until a signal."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import Config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.errors import ControlPlaneFailed
from herdbook.signals import STOP_GRACE, stop_on_signals, stopped_by_signal

log = logging.getLogger(__name__)


async def run(config: Config, *, demo: int = 0,
              on_ready: Callable[[dict[str, Any]], None] | None = None,
              stop: asyncio.Event | None = None, http_best_effort: bool = False) -> None:
    """Run the control plane until ``stop`` is set (SIGINT/SIGTERM by default); stopped
    within 2 s of the signal whatever NATS does (``herdbook.signals``). Raises
    ``ControlPlaneFailed`` once it could not go on (its embedded server kept dying)."""
    stop = stop or asyncio.Event()
    plane = bootstrap(config, clock=SYSTEM_CLOCK, demo=demo, on_failure=stop.set,
                      http_best_effort=http_best_effort)
    stop_on_signals(stop)
    try:
        info = await plane.start()
        if on_ready is not None:
            on_ready(info)
        await stop.wait()
    except asyncio.CancelledError as err:
        if not stopped_by_signal(stop, err):
            raise
    finally:
        try:
            await plane.stop()
        except asyncio.CancelledError as err:
            # The signal's grace ran out while parts stopped (a NATS cluster electing a
            # new leader answers nothing for seconds): the stop that was asked for, not
            # a failure to print as a traceback.
            if not stopped_by_signal(stop, err):
                raise
            log.warning("stopped before every part did (the signal's %.1f s grace ran out)",
                        STOP_GRACE)
        finally:
            if plane.failure is not None:
                # The cause of whatever else went wrong meanwhile: one line, no traceback.
                raise ControlPlaneFailed(plane.failure)  # noqa: B012
