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
