"""`herd node ...`: list, describe, history, status; the node commands (approve, cordon,
drain, add, ...) are generated from the command table by ``herdbook.cli.node_actions``."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client, node_actions, node_list
from herdbook.cli.node_args import server
from herdbook.cli.node_list import LOG_TIMEOUT as LOG_TIMEOUT  # audit.py reads it here
from herdbook.cli.node_list import ORDER_KEYS, parse_at
from herdbook.cli.output import (
    Format,
    Output,
    console,
    echo,
    print_hint,
    print_validation_hint,
    render_object,
    render_rows,
)

node_app = typer.Typer(help="See nodes and decide their membership (Bacalhau style).",
                       no_args_is_help=True)

At = Annotated[str | None, typer.Option("--at", help="As the event log had it then: "
                                        "ISO-8601 (2026-11-21T10:00:00Z) or ago (10m, 2h, 1d).")]


@node_app.command("list")
def list_nodes(
    ctx: typer.Context,
    output: Output = Format.table,
    wide: Annotated[bool, typer.Option("--wide", help="Add health, class, labels, "
                                       "last heartbeat and GPUs.")] = False,
    filter_approval: Annotated[list[str] | None, typer.Option(
        "--filter-approval", help="pending, approved or rejected (repeat or comma-separate).")] = None,
    filter_state: Annotated[list[str] | None, typer.Option(
        "--filter-state", help="A state (ready, degraded, down, ...) or an alias: active, "
        "connected, disconnected, unhealthy.")] = None,
    labels: Annotated[str | None, typer.Option("--labels", "--selector", "-l", help="Only "
                                               "nodes with these labels: k=v[,k=v].")] = None,
    order_by: Annotated[str, typer.Option("--order-by", help="Sort key: "
                                          + ", ".join(ORDER_KEYS) + "; prefix - to reverse.")] = "id",
    at: At = None,
) -> None:
    """List nodes; follows the API's pages, so any fleet size lists in full.

    With --at, the nodes as the event log had them then (no heartbeat or allocation
    fields)."""
    node_list.list_nodes(server(ctx), output, wide, filter_approval, filter_state, labels,
                         order_by, at)


@node_app.command("describe")
def describe(ctx: typer.Context,
             node_id: Annotated[str, typer.Argument(help="Node id or a unique prefix of one.")],
             output: Output = Format.table, at: At = None) -> None:
    """Everything known about one node, including the reason of its last approval decision.

    With --at, the node as the event log had it then (no heartbeat or resources)."""
    client.check_id(node_id)
    if at is None:
        from herdbook.api.messages import ById, NodeDescription
        node = client.plain(client.call(server(ctx), "node.describe", ById(id=node_id),
                                        NodeDescription))
        render_object(node, output)
        print_hint(node.get("recommended_action"), str(node.get("id", node_id)), output)
        print_validation_hint(node, output)
        return
    from herdbook.api.history_messages import NodeAt
    request = NodeAt(id=node_id, at=parse_at(at))
    render_object(client.run(server(ctx), lambda nc: client.request(
        nc, "node.describe_at", request, timeout=LOG_TIMEOUT)), output)


HISTORY_COLUMNS = [("TIME", "at"), ("EVENT", "event"), ("ACTOR", "actor"),
                   ("REASON", "reason"), ("CAUSED BY", "caused_by")]


@node_app.command("history")
def history(ctx: typer.Context,
            node_id: Annotated[str, typer.Argument(help="Node id or a unique prefix of one.")],
            output: Output = Format.table,
            limit: Annotated[int, typer.Option("--limit", min=1, max=5000,
                                               help="The newest N events.")] = 1000) -> None:
    """Every event of the node, what caused it and what it caused.

    A table (time, event, actor, reason, caused by), then the cause chains across nodes,
    allocations and evaluations. Reads the whole event log."""
    from herdbook.api.history_messages import NodeHistory, NodeHistoryReply
    request = NodeHistory(id=client.check_id(node_id), limit=limit)
    result = client.plain(client.run(server(ctx), lambda nc: client.request(
        nc, "node.history", request, NodeHistoryReply, timeout=LOG_TIMEOUT)))
    if output is not Format.table:
        if output is Format.csv:
            render_rows(result["items"], HISTORY_COLUMNS + [("SEQ", "seq")], output)
        else:
            render_object(result, output)
        return
    if result.get("omitted"):
        console.print(f"({result['omitted']} older events omitted: --limit)", markup=False)
    render_rows(result["items"], HISTORY_COLUMNS, output)
    for number, chain in enumerate(result["chains"]):
        console.print("\ncause chains:" if number == 0 else "", markup=False)
        for line in chain["lines"]:
            echo(line)


node_actions.register(node_app, ("node",))   # every verb of api/commands.py's table


STATUS_KEYS = ("id", "state", "approval", "lifecycle", "health", "intent", "schedulable",
               "class", "heartbeating", "last_heartbeat", "allocations", "gpus",
               "lifecycle_reason", "intent_reason", "boot_failures")


@node_app.command("status")
def status(ctx: typer.Context, node_id: Annotated[str, typer.Argument(
        help="Node id or a unique prefix of one.")], output: Output = Format.table) -> None:
    """The node's current state, allocations and health, in short."""
    from herdbook.api.messages import ById, NodeDescription
    client.check_id(node_id)
    node = client.plain(client.call(server(ctx), "node.describe", ById(id=node_id),
                                    NodeDescription))
    render_object({k: node.get(k) for k in STATUS_KEYS}, output)
