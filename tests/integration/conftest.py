"""The in-process scheduler harness as a fixture, for every integration test that needs
the real projector, broker, scheduler and allocation reactor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_scheduler import Harness


@pytest.fixture
async def h(nc: Any, tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(nc, tmp_path / "view.db")
    await harness.projector.start()
    harness.reactor.start()
    try:
        yield harness
    finally:
        await harness.scheduler.stop()
        await harness.reactor.stop()
        await harness.projector.stop()
