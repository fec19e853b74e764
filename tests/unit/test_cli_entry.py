"""`herd node list` parsed without typer (``herdbook.cli.entry``): the options it takes as
written, and everything it leaves to the typer app (which prints help and errors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from herdbook.cli.entry import parse_list, parse_node_list


def test_takes_the_list_options_in_each_written_form() -> None:
    found = parse_node_list(["-s", "nats://h:1", "--user=u", "node", "list", "-o", "json",
                             "--wide", "--filter-state", "ready", "--filter-state=down",
                             "--selector", "a=b", "--order-by", "-state"])
    assert found == {"server": "nats://h:1", "user": "u", "output": "json", "wide": True,
                     "filter_approval": [], "filter_state": ["ready", "down"],
                     "labels": "a=b", "order_by": "-state"}
    assert parse_node_list(["node", "list"]) == {"filter_approval": [], "filter_state": [],
                                                 "wide": False}


@pytest.mark.parametrize("args", [
    [], ["node"], ["node", "describe", "x"], ["node", "list", "--help"], ["node", "list", "-h"],
    ["--help", "node", "list"], ["node", "list", "-ojson"], ["node", "list", "-o", "JSON"],
    ["node", "list", "-o"], ["node", "list", "--bogus"], ["node", "list", "extra"],
    ["node", "list", "--"], ["node", "--wide", "list"], ["--wide", "node", "list"],
    ["node", "list", "-s", "nats://h:1"], ["node", "list", "-o=json"], ["list", "node"],
    ["node", "list", "--wide=yes"],
])
def test_leaves_anything_else_to_the_typer_app(args: list[str]) -> None:
    assert parse_node_list(args) is None


def test_takes_gpu_list_and_its_options() -> None:
    assert parse_list(["-s", "nats://h:1", "gpu", "list", "--health", "critical",
                       "--health=fatal,unknown", "-l", "pool=a", "--node", "n1", "-o",
                       "json"]) == ("gpu", {
        "server": "nats://h:1", "health": ["critical", "fatal,unknown"], "labels": "pool=a",
        "node": "n1", "output": "json"})
    assert parse_list(["gpu", "list"]) == ("gpu", {"health": []})
    assert parse_list(["node", "list"]) == ("node", {"filter_approval": [],
                                                     "filter_state": [], "wide": False})


@pytest.mark.parametrize("args", [
    ["gpu"], ["gpu", "describe", "n1/0"], ["gpu", "list", "--help"], ["gpu", "list", "--wide"],
    ["gpu", "list", "--filter-state", "ready"], ["gpu", "list", "-o", "JSON"],
    ["gpu", "--node", "n1", "list"], ["gpu", "list", "x"], ["gpu", "list", "--health"],
])
def test_leaves_any_other_gpu_command_to_the_typer_app(args: list[str]) -> None:
    assert parse_list(args) is None


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
