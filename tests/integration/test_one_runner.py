"""Every reactor of a control plane, and its API, decides through the plane's one
``DecideRunner`` (``control/bootstrap.py``), not a runner of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from herdbook.control.parts import PerTerm
from tests.conftest import free_port
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually


async def test_the_reactors_and_the_api_share_the_planes_runner(tmp_path: Path) -> None:
    async with running_plane(f"nats: {{port: {free_port()}}}\ndata_dir: '{tmp_path / 'd'}'\n"
                             "node_id: cp-runner\n") as plane:
        terms = [p for p in plane.parts.parts if isinstance(p, PerTerm)]

        async def leading() -> bool:
            return all(p.current is not None for p in terms)

        await eventually(leading, timeout=15)
        deciders: dict[str, Any] = {p.name: p.current for p in terms
                                    if hasattr(p.current, "runner")}
        assert set(deciders) == {"instance manager", "notifier", "allocation reactor",
                                 "scheduler", "sensitive reactor", "validation reactor"}
        deciders |= {"api": plane.api, "approver": plane.approver,
                     "classifier": plane.classifier,
                     "sweeper's declarations": plane.sweeper.declarations}
        shared = {name: part.runner is plane.runner for name, part in deciders.items()}
        assert shared == dict.fromkeys(deciders, True)
