"""`herd node list` parsed without typer (``herdbook.cli.entry``): the options it takes as
written, and everything it leaves to the typer app (which prints help and errors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from herdbook.cli.entry import parse_node_list


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
