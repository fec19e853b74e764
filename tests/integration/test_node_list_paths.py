"""`herd node list` parsed without typer (``herdbook.cli.entry``) prints what the typer
app prints for the same flags (output, errors, exit code), and imports neither typer,
rich, aiohttp nor nats-py's JetStream modules on the way."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from herdbook.cli.node_list import LIST_COLUMNS, WIDE_COLUMNS
from herdbook.cli.output import Format, render_rows
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.node import NodeApproved, NodeInfo, NodeRegistered
from herdbook.events.store import EventStore
from tests.integration.test_agent_and_control import eventually

TYPER = "import sys; from herdbook.cli.main import main; sys.argv[0] = 'herd'; main()"
FAST = "import sys; from herdbook.cli.entry import main; sys.argv[0] = 'herd'; main()"
PROBE = """
import json, sys
from herdbook.cli.entry import main
sys.argv[0] = "herd"
try:
    main()
finally:
    sys.stderr.write(json.dumps(sorted(sys.modules)))
"""
FLAGS = [(), ("-o", "json"), ("--wide",), ("-o", "json", "--order-by", "-id"),
         ("--output=csv", "--wide", "--order-by", "-approval"), ("-o", "yaml"),
         ("--filter-approval", "approved", "-l", "zone=a"), ("--filter-state=ready,down",),
         ("--filter-state", "sleepy"), ("--order-by", "colour"), ("--filter-approval", "maybe"),
         ("-l", "novalue"), ("--at", "yesterday-ish")]


def _run(code: str, server: str, *args: str) -> tuple[int, str, str]:
    result = subprocess.run([sys.executable, "-c", code, "--server", server, "node", "list",
                             *args], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "200"})
    return result.returncode, result.stdout, result.stderr


async def test_the_fast_path_prints_what_the_typer_app_prints(nc: Any, nats_server: Any,
                                                              tmp_path: Path) -> None:
    store = EventStore(nc)
    for number in range(7):
        node = f"gpu-{number}"
        labels = {"zone": "a" if number % 2 else "b", "note": "\x1b[31m[bold]x"}
        seq = await store.append(NodeRegistered(
            node_id=node, boot_id="b", info=NodeInfo(hostname=f"h{number}", labels=labels)),
            expected_version=0)
        if number % 3:
            await store.append(NodeApproved(node_id=node, reason="ok"), expected_version=seq)
    plane = bootstrap(parse_config(f"nats: {{url: '{nats_server.url}'}}\n"
                                   f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-fast\n"),
                      clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        assert plane.projector is not None
        nodes = plane.projector.nodes
        await eventually(lambda: _listed(nodes))
        for flags in FLAGS:
            fast, typer = await asyncio.gather(
                asyncio.to_thread(_run, FAST, nats_server.url, *flags),
                asyncio.to_thread(_run, TYPER, nats_server.url, *flags))
            assert _steady(fast) == _steady(typer), flags
            assert "Traceback" not in fast[2], flags
        # the table read as Structs of its fields shows what the rows as dicts show
        _, listed, _ = await asyncio.to_thread(_run, FAST, nats_server.url, "-o", "json")
        _, backwards, _ = await asyncio.to_thread(_run, FAST, nats_server.url, "-o", "json",
                                                  "--order-by", "-id")
        assert [r["id"] for r in json.loads(backwards)] == [
            r["id"] for r in json.loads(listed)][::-1] and len(json.loads(listed)) == 8
        for flags, columns in ((("--wide",), LIST_COLUMNS + WIDE_COLUMNS),
                               (("-o", "csv", "--order-by", "-class"), LIST_COLUMNS)):
            rows = sorted(json.loads(listed), key=lambda r: str(r["class"]), reverse=True)
            for row in rows:
                age = row["heartbeat_age"]
                row["heartbeat_ago"] = None if age is None else f"{age:.0f}s ago"
            shown = io.StringIO()
            with redirect_stdout(shown):
                render_rows(rows, columns, Format.csv if "csv" in flags else Format.table)
            table = await asyncio.to_thread(_run, FAST, nats_server.url, *flags)
            assert _steady(table) == _steady((0, shown.getvalue(), "")), flags
        code, out, err = await asyncio.to_thread(_run, PROBE, nats_server.url, "-o", "json")
        assert code == 0 and "gpu-0" in [row["id"] for row in json.loads(out)]
        loaded = json.loads(err)
        assert "herdbook.cli.node_list" in loaded and "nats" in loaded
        assert not [m for m in loaded if m.split(".")[0] in ("typer", "rich", "aiohttp", "click")]
        assert "nats.js.client" not in loaded       # no JetStream call, no JetStream code
    finally:
        await plane.stop()


LIVE = ("last_heartbeat", "heartbeat_age", "heartbeating")


def _steady(result: tuple[int, str, str]) -> tuple[int, str, str]:
    """``result`` without what moves between two runs: the control plane's own node
    (a requester) heartbeats."""
    code, out, err = result
    try:
        rows = json.loads(out)
    except ValueError:
        lines = [line for line in out.splitlines() if line.strip().split(":")[0] not in LIVE]
        out = "\n".join(" ".join(re.sub(r"\b\d+s ago", "_", line).split()) for line in lines)
    else:
        out = json.dumps([{k: v for k, v in row.items() if k not in LIVE} for row in rows])
    return code, out, err


async def _listed(nodes: Any) -> bool:
    views = [nodes.get(f"gpu-{number}") for number in range(7)]
    return None not in views and [v.approval.value for v in views].count("APPROVED") >= 4
