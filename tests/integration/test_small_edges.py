"""Small edges seen from outside (issue 26, item 9) against an in-process control plane:
a smaller ``--demo`` where a larger one ran names the nodes it no longer simulates."""

from __future__ import annotations

import asyncio
import logging
from typing import Any


async def test_a_smaller_demo_in_the_same_data_dir_warns_of_the_nodes_it_leaves(
        tmp_path: Any, caplog: Any) -> None:
    """The README walkthrough's `--demo 5` where `--demo 20` ran: the 15 nodes nobody
    simulates are named at start, not found DEGRADED later."""
    from herdbook.clock import SYSTEM_CLOCK
    from herdbook.config import parse_config
    from herdbook.control.bootstrap import bootstrap
    from tests.conftest import free_port

    text = f"nats: {{port: {free_port()}}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp-demo\n"
    caplog.set_level(logging.WARNING, logger="herdbook.control.demo")
    for count, registered in ((3, 3), (1, 0)):
        plane = bootstrap(parse_config(text), clock=SYSTEM_CLOCK, demo=count)
        await plane.start()
        try:
            for _ in range(100):
                if sum(n.startswith("demo-") for n in plane.projector.nodes) >= registered:
                    break
                await asyncio.sleep(0.1)
        finally:
            await plane.stop()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("--demo 1: 2 demo node(s) of an earlier run "
                                                 "in this data dir (demo-001 … demo-002)"), said


async def test_an_agent_given_another_nodes_creds_says_so_and_exits(tmp_path: Any) -> None:
    """`herd agent --node-id gpu-2` with gpu-1's creds: one line naming both nodes and
    exit 2 at once, not a loop of permission violations that never says why."""
    import subprocess

    from tests.conftest import free_port, herd
    from tests.integration.conftest import running_plane
    from tests.integration.test_auth import issue

    async with running_plane(f"nats: {{port: {free_port()}, auth: true}}\n"
                             f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-auth\n") as plane:
        creds = await issue(tmp_path, "agent", "gpu-1")
        try:
            result = await asyncio.to_thread(
                herd, "agent", "--node-id", "gpu-2", "--creds", str(creds), "--server",
                plane.url, "--fake-gpus", "1", "--state-dir", str(tmp_path / "gpu-2"),
                timeout=20)
        except subprocess.TimeoutExpired as err:
            raise AssertionError(f"the agent ran on: {err.stderr!r}"[-2000:]) from None
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("Error: ") and "gpu-1" in lines[0] and "gpu-2" in lines[0]
    assert "herd creds agent gpu-2" in lines[0]
    assert not (tmp_path / "gpu-2" / "heartbeat-seq").exists()   # nothing started
