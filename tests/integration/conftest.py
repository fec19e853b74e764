"""The in-process scheduler harness as a fixture, for every integration test that needs
the real projector, broker, scheduler and allocation reactor."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.plane import ControlPlane
from tests.integration.test_scheduler import Harness
from tests.servers import nats_server, nc, nc_without_atomic  # noqa: F401 - fixtures


@contextlib.asynccontextmanager
async def running_plane(config_yaml: str) -> AsyncIterator[ControlPlane]:
    """A control plane in-process (`herd up` without the process), started from a YAML
    config and stopped at the end."""
    control = bootstrap(parse_config(config_yaml), clock=SYSTEM_CLOCK)
    await control.start()
    try:
        yield control
    finally:
        await control.stop()


@pytest.fixture
async def h(nc: Any, tmp_path: Path) -> AsyncIterator[Harness]:  # noqa: F811 - the fixture nc
    harness = Harness(nc, tmp_path / "view.db")
    await harness.projector.start()
    harness.reactor.start()
    try:
        yield harness
    finally:
        await harness.scheduler.stop()
        await harness.reactor.stop()
        await harness.projector.stop()
