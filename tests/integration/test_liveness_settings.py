"""The liveness settings with `herd up --auth` (issue 16, item 5): an agent with its own
credentials reads them and derives its heartbeat interval; neither an agent nor an
operator can overwrite them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from herdbook.agent.heartbeat_interval import read_settings
from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.credentials import NatsAuth
from herdbook.events.liveness_settings import LIVENESS_SUBJECT, LivenessSettings
from tests.integration.test_agent_and_control import eventually
from tests.integration.test_auth import connect_as, issue, plane  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(120)


async def test_an_agent_reads_the_settings_and_nobody_but_the_plane_writes_them(
        plane: ControlPlane, tmp_path: Path) -> None:  # noqa: F811
    agent_creds = await issue(tmp_path, "agent", "gpu-1")
    operator_creds = await issue(tmp_path, "operator", "--name", "mallory")
    agent = Agent(AgentOptions(server=plane.url, node_id="gpu-1", state_dir=str(tmp_path / "a"),
                               fake_gpus=1, auth=NatsAuth(creds=str(agent_creds))))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 15)
        assert agent.pace.settings is not None
        assert agent.pace.settings.heartbeat_timeout["standard"] == 5.0   # the fixture's
        assert agent.pace.interval == pytest.approx(5.0 / 3)
        assert agent.pace.warning is None

        async def beat_says_so() -> bool:
            beat = plane.sweeper.beats.get("gpu-1") if plane.sweeper else None
            return beat is not None and beat.interval == pytest.approx(5.0 / 3)

        await eventually(beat_says_so, timeout=15)
    finally:
        await agent.stop()
        await task

    forged = msgspec.json.encode(LivenessSettings(heartbeat_timeout={"standard": 3600.0},
                                                  grace_period={}, boot_timeout=1.0))
    for creds in (agent_creds, operator_creds):
        errors: list[str] = []
        nc = await connect_as(plane, creds, errors)
        try:
            await nc.publish(LIVENESS_SUBJECT, forged)
            await nc.flush()
            await asyncio.sleep(0.3)
            assert any("permissions violation" in e.lower() for e in errors), errors
        finally:
            await nc.close()
    reader = await connect_as(plane, agent_creds, [])
    try:
        settings = await read_settings(reader)
        assert settings is not None and settings.heartbeat_timeout["standard"] == 5.0
    finally:
        await reader.close()
