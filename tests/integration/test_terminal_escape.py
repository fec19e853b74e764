"""The real CLI against a real control plane: labels, hostnames, actors and reasons from
events reach the terminal with their control characters escaped and their markup
literal; -o json keeps them as they are."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.node import NodeCordoned, NodeInfo, NodeRegistered
from herdbook.events.store import EventStore
from tests.conftest import herd
from tests.integration.test_agent_and_control import eventually

HOSTILE = "\x1b[31mred\x07 [bold]loud[/bold]\nnext"
SHOWN = "\\x1b[31mred\\x07 [bold]loud[/bold]\\nnext"


async def test_the_cli_escapes_what_events_carry(nc: Any, nats_server: Any,
                                                  tmp_path: Path) -> None:
    store = EventStore(nc)
    seq = await store.append(NodeRegistered(
        node_id="gpu-1", boot_id="b", actor=HOSTILE,
        info=NodeInfo(hostname=HOSTILE, labels={"team": HOSTILE})), expected_version=0)
    await store.append(NodeCordoned(node_id="gpu-1", reason=HOSTILE, actor=HOSTILE),
                       expected_version=seq)
    plane = bootstrap(parse_config(f"nats: {{url: '{nats_server.url}'}}\n"
                                   f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-esc\n"),
                      clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        assert plane.projector is not None
        views = plane.projector.nodes
        await eventually(lambda: _cordoned(views))

        async def cli(*args: str) -> str:
            result = await asyncio.to_thread(herd, *args, server=nats_server.url)
            assert result.returncode == 0, result.stderr
            return result.stdout

        for args in (("node", "list", "--wide"), ("node", "describe", "gpu-1"),
                     ("node", "history", "gpu-1"), ("events", "tail"), ("audit", "list"),
                     ("node", "list", "--wide", "-o", "csv")):
            out = await cli(*args)
            assert "\x1b" not in out and "\x07" not in out, (args, out)
            assert SHOWN in out, (args, out)
        described = json.loads(await cli("node", "describe", "gpu-1", "-o", "json"))
        assert described["labels"] == {"team": HOSTILE}
    finally:
        await plane.stop()


async def _cordoned(views: Any) -> bool:
    view = views.get("gpu-1")
    return view is not None and view.intent.value == "CORDONED"
