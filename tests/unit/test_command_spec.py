"""One table of node commands (issue 30 item 3): every verb of ``api/commands.py`` has a
NATS route, an HTTP action path, an OpenAPI operation, a CLI command and a console entry,
each generated from the table, and none of those offers a verb the table lacks; no module
spells a verb list of its own (the five copies this replaced). Pure: no server runs."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import typer.main

import herdbook
from herdbook.api.commands import BY_NAME, GROUPS, VERBS, spec_json
from herdbook.api.nodes import NodeRoutes
from herdbook.cli.main import app as cli_app
from herdbook.config import Config
from herdbook.web import console
from herdbook.web.http_api import WebServer
from herdbook.web.openapi import LINKS, NODE_ACTION_PATH, READS, ROUTES, document

NAMES = {verb.name for verb in VERBS}
ROOT = Path(herdbook.__file__).parent

CLI_QUERIES = {"list", "describe", "history", "status", "fingerprint", "conformance"}
"""`herd node` commands that are not verbs: they read, or ask the agent over NATS."""


def node_routes() -> dict[str, Any]:
    nodes = NodeRoutes(None, None, None, None, None, Config())  # type: ignore[arg-type]
    return nodes.routes()


def test_every_verb_is_a_nats_route_and_every_node_command_route_a_verb() -> None:
    commands = {name for name in node_routes() if name not in READS}
    assert commands == {verb.route for verb in VERBS}


def test_every_verb_is_an_http_action_path_and_nothing_else_is() -> None:
    server = object.__new__(WebServer)
    server.api = SimpleNamespace(routes=node_routes())   # type: ignore[assignment]
    patterns = [str(r.get_info().get("pattern", "")) for r in server.app().router.resources()
                if r.canonical.startswith(NODE_ACTION_PATH)
                and "{action" in r.canonical]
    assert len(patterns) == 1, patterns
    offered = set(re.search(r"\(\?P<action>\(([^)]*)\)", patterns[0]).group(1)  # type: ignore[union-attr]
                  .split("|"))
    assert offered == NAMES


def test_every_verb_is_an_openapi_operation_typed_by_its_request() -> None:
    doc = document()
    actions = {path.removeprefix(NODE_ACTION_PATH) for path in doc["paths"]
               if path.startswith(NODE_ACTION_PATH) and "post" in doc["paths"][path]}
    assert actions == NAMES
    for verb in VERBS:
        assert ROUTES[verb.route].request is verb.request
        operation = doc["paths"][NODE_ACTION_PATH + verb.name]["post"]
        assert operation["operationId"] == f"nodes_{verb.name}"
        assert operation["description"].startswith(verb.help.split("\n")[0])
    # the fuzzer's links name only operations the document has (no verb outside the table)
    ops = {op["operationId"] for item in doc["paths"].values() for op in item.values()}
    assert {target for links in LINKS.values() for target, _ in links.values()} <= ops


def cli_commands() -> dict[tuple[str, ...], Any]:
    group: Any = typer.main.get_command(cli_app)
    out = {("node", name): cmd for name, cmd in group.commands["node"].commands.items()}
    admin = group.commands["admin"].commands["node"].commands
    return out | {("admin", "node", name): cmd for name, cmd in admin.items()}


def test_every_verb_is_a_cli_command_with_its_options_and_no_other_command_is_a_verb() -> None:
    commands = cli_commands()
    verbs = {path for path in commands if path[-1] not in CLI_QUERIES}
    assert verbs == {(*verb.cli, verb.name) for verb in VERBS}
    for verb in VERBS:
        cmd = commands[(*verb.cli, verb.name)]
        assert cmd.help == verb.help
        flags = {opt for param in cmd.params for opt in getattr(param, "opts", ())}
        assert {f"--{o.name}" for o in verb.options} <= flags
        assert ("--selector" in flags) == verb.bulk
        asks = verb.confirm is not None and verb.confirm.cli
        assert ("--yes" in flags) == asks


def test_the_console_reads_the_table_as_served() -> None:
    response = asyncio.run(console._node_commands(None))  # type: ignore[arg-type]
    served = msgspec.json.decode(response.body)
    assert served == {"groups": list(GROUPS), "commands": msgspec.json.decode(
        msgspec.json.encode(spec_json()))}
    assert [c["name"] for c in served["commands"]] == [v.name for v in VERBS]
    for verb in VERBS:
        assert verb.group in GROUPS
        # a verb the fleet's toolbar sends with only a reason needs no option to be given
        assert not (verb.bulk and any(o.required for o in verb.options)), verb.name


VERB = "|".join(sorted(NAMES))
Q = "[\"'`]"
LIST = re.compile(f"{Q}({VERB}){Q}\\s*,\\s*{Q}({VERB}){Q}")
ROUTE = re.compile(f"{Q}node\\.({VERB}){Q}")
JS_ONLY = [re.compile(f"===?\\s*{Q}({VERB}){Q}"),              # action === "drain"
           re.compile(f"(?:^|[{{,])\\s*({VERB})\\s*:\\s", re.M),  # { disable: ... }
           re.compile(f"/v1/nodes/[^\"'`\\s]*/({VERB})\\b")]


def spelled(text: str, js: bool) -> list[str]:
    found = [m.group(0) for p in [LIST, ROUTE, *(JS_ONLY if js else [])]
             for m in p.finditer(text)]
    return found


def test_no_module_lists_the_verbs_by_hand() -> None:
    """A list of verbs, a ``node.<verb>`` route name or a verb special-cased in the
    console, outside the table: a sixth copy."""
    files = [p for p in ROOT.rglob("*.py") if p != ROOT / "api" / "commands.py"]
    files += (ROOT / "web" / "console").glob("*.js")
    copies = {str(p.relative_to(ROOT)): found for p in files
              if (found := spelled(p.read_text(), p.suffix == ".js"))}
    assert copies == {}


def test_the_hand_list_check_sees_the_copies_this_table_replaced() -> None:
    assert spelled('const BULK = ["cordon", "drain"];', js=True)
    assert spelled('if (action === "drain") {}', js=True)
    assert spelled('const QUESTIONS = {\n  disable: id => 1 };', js=True)
    assert spelled('act(ctx, "node.approve", chosen)', js=False)
    assert spelled('NODE_COMMANDS = ("approve", "reject")', js=False)
    assert BY_NAME["wipe"].cli == ("admin", "node")
