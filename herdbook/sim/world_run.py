"""One run of a simulated world for `herd sim`: start it, hand it to the mode (a
scenario's timeline, chaos's injections), report on it, stop it. Both modes share these
steps so that a world that does not start, the report and the clean-up read the same."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from herdbook.control.errors import StartupError
from herdbook.sim.scenario import FleetGroup
from herdbook.sim.world import World, prepare_data_dir, remove_data_dir

EXIT_NOT_STARTED = 3


class WorldReport(Protocol):
    """The fields of a mode's result that the run of its world fills in."""

    exit_code: int
    failure: str | None
    startup_s: float
    duration_s: float
    loop_lag: dict[str, Any]
    control_plane: dict[str, Any]


Report = TypeVar("Report", bound=WorldReport)


async def run_world(result: Report, config: dict[str, Any], groups: list[FleetGroup],
                    data_dir: str | Path | None,
                    body: Callable[[World], Awaitable[bool]]) -> Report:
    """Start a world in ``data_dir`` (a temporary one, removed afterwards, if None) and
    await ``body`` with it; a world that does not start sets EXIT_NOT_STARTED and a
    one-line failure, never raises. ``body`` returns whether the world is worth a report
    (how late the loop was, `herd status`): a mode that gave up before its run began
    says no. The world is stopped whatever happens. Raises DataDirError (before
    anything starts) for a given ``data_dir`` that is not empty."""
    path, temporary = prepare_data_dir(data_dir)
    began = time.monotonic()
    try:
        # bootstrap refuses a health policy that does not load before anything starts
        world = World(config, groups, path)
    except StartupError as err:
        if temporary:
            remove_data_dir(path)
        _not_started(result, err)
        return result
    try:
        try:
            await world.start()
        except (StartupError, OSError) as err:
            _not_started(result, err)
            return result
        result.startup_s = round(time.monotonic() - began, 3)
        if await body(world):
            result.loop_lag = world.loop_lag.summary()
            result.control_plane = await world.report_status()
    finally:
        await world.stop()
        result.duration_s = round(time.monotonic() - began, 3)
        if temporary:
            remove_data_dir(path)
    return result


def _not_started(result: WorldReport, err: Exception) -> None:
    result.exit_code = EXIT_NOT_STARTED
    result.failure = f"the simulated control plane did not start: {err}"
