"""What the node commands share (`herd node ...`, `herd admin node ...`): their
arguments, and sending one node command with its warnings."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import console, safe

Reason = Annotated[str, typer.Option("--message", "-m", help="Why: stored on the event.")]
NodeId = Annotated[str, typer.Argument(help="The node's id.")]

def server(ctx: typer.Context) -> str:
    return str(ctx.obj["server"])


def parse_labels(text: str | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise client.fail(f"invalid label {part!r}: write key=value[,key=value]",
                              client.EXIT_USAGE)
        labels[key.strip()] = value.strip()
    return labels


def split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v.strip()]


Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


def send_command(ctx: typer.Context, route: str, node_id: str, reason: str,
             kind: Any = None, **extra: Any) -> None:
    """Send a node command: ``kind`` is its request Struct (``NodeCommand`` unless the
    route takes more, given as ``extra``)."""
    from herdbook.api.messages import CommandResult, NodeCommand
    client.check_id(node_id)
    request = (kind or NodeCommand)(id=node_id, reason=reason, actor=client.actor(), **extra)
    result = client.call(server(ctx), route, request, CommandResult)
    # The goal already held (kubectl's "already cordoned"): a success naming the state.
    console.print(safe(f"Ok: {result.unchanged}") if result.unchanged else "Ok", markup=False)
    warn_if_stale(result.node)


def warn_if_stale(node: Any) -> None:
    """An operator acting on a node that stopped heartbeating should know it."""
    from herdbook.events.states import NodeType
    if node is None or node.heartbeating or node.type is NodeType.REQUESTER:
        return
    age = node.heartbeat_age
    when = "has never heartbeated" if age is None else f"last heartbeated {age:.0f}s ago"
    client.err_console.print(safe(f"Warning: node {node.id} {when}"), markup=False)


def interactive() -> bool:
    """Someone at a terminal can answer a question."""
    import sys
    return sys.stdin.isatty()


def confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not interactive():
        raise client.fail(f"{question} needs confirmation: pass --yes", client.EXIT_USAGE)
    if not typer.confirm(question, default=False):
        raise client.fail("aborted", client.EXIT_REFUSED)
