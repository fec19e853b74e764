"""`herd` in a fresh interpreter (``herdbook.cli.entry`` and the typer app): what it
imports lazily, and that both paths refuse alike before any control plane is needed.
Moved from tests/unit (they start processes); the parsing itself is tested there
(``tests/unit/test_cli_entry.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

DEFERRED = """
import sys
from herdbook.cli.client import import_nats
import_nats(sys.argv[1])
loaded = {m for m in sys.modules if m in ("aiohttp", "nats.js.client")}
import nats
from nats.js import JetStreamContext
from nats.js.api import Header
assert nats.js.JetStreamContext is JetStreamContext and Header.STATUS.value == "Status"
import aiohttp
print(sorted(loaded), aiohttp.ClientSession.__name__)
"""


@pytest.mark.parametrize(("server", "shown"), [
    ("nats://127.0.0.1:4222", "[] ClientSession"),
    ("nats://a:1,ws://b:2", "['aiohttp'] ClientSession"),
])
def test_nats_without_websockets_and_jetstream_until_used(server: str, shown: str) -> None:
    """``client.import_nats``: aiohttp only for a websocket URL, nats.js run on first use,
    and both work afterwards in the same process."""
    result = subprocess.run([sys.executable, "-c", DEFERRED, server], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == shown


PATHS = {"fast": "import sys; from herdbook.cli.entry import main; sys.argv[0] = 'herd'; main()",
         "typer": "import sys; from herdbook.cli.main import main; sys.argv[0] = 'herd'; main()"}


@pytest.mark.parametrize("args", [
    ["--server", "nats://127.0.0.1:1", "node", "list"],
    ["--creds", "/nonexistent/op.creds", "node", "list", "-o", "json"],
    ["--user", "alice", "node", "list"],
    ["--server", "http://x", "node", "list"],
    ["--server", "", "node", "list"],
    ["node", "list", "--order-by", "colour"],
    ["--server", "nats://127.0.0.1:1", "gpu", "list"],
    ["gpu", "list", "--health", "sick"],
    ["gpu", "list", "--node", "no such id"],
    ["--server", "http://x", "gpu", "list", "-o", "csv"],
    ["gpu", "list", "-l", "novalue"],
])
def test_refusals_read_as_the_typer_app_says_them(args: list[str]) -> None:
    """No control plane needed: what is refused before or at the connection prints the
    same line and exit code on both paths."""
    said = {name: subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                                 text=True, timeout=60, env={"HERD_SERVER": "nats://127.0.0.1:1",
                                                             "PATH": ""})
            for name, code in PATHS.items()}
    fast, typer = said["fast"], said["typer"]
    assert (fast.returncode, fast.stdout, fast.stderr) == (
        typer.returncode, typer.stdout, typer.stderr)
    assert fast.returncode != 0 and fast.stderr.startswith("Error: ") and "Traceback" not in fast.stderr
