"""`herd node ...`: list, describe, history, add, reboot, status; the commands that take
many nodes live in ``herdbook.cli.node_actions``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from herdbook.cli import client, node_actions
from herdbook.cli.node_args import NodeId, Reason, parse_labels, send_command, server, split
from herdbook.cli.output import (
    Format,
    Output,
    console,
    echo,
    render_json_items,
    render_object,
    render_rows,
)

node_app = typer.Typer(help="See nodes and decide their membership (Bacalhau style).",
                       no_args_is_help=True)

LIST_COLUMNS = [("ID", "id"), ("TYPE", "type"), ("APPROVAL", "approval"), ("STATE", "state")]
WIDE_COLUMNS = [("HEALTH", "health"), ("CLASS", "class"), ("LABELS", "labels"),
                ("LAST HEARTBEAT", "heartbeat_ago"), ("GPUS", "gpus"),
                ("ALLOCS", "allocations"), ("FINGERPRINT", "fingerprint_group"),
                ("CLAIMED BY", "claimed_by")]
ORDER_KEYS = ("id", "type", "approval", "state", "health", "class", "last_heartbeat", "gpus")

At = Annotated[str | None, typer.Option("--at", help="As the event log had it then: "
                                        "ISO-8601 (2026-11-21T10:00:00Z) or ago (10m, 2h, 1d).")]
LOG_TIMEOUT = 300.0
"""Requests that read the event log: their cost grows with it."""


def parse_at(text: str, option: str = "--at") -> datetime:
    """TIME as an absolute UTC time for the API; a bad one is a usage error."""
    from datetime import UTC

    from herdbook.history.times import parse_time
    try:
        return parse_time(text, datetime.now(UTC))
    except ValueError as err:
        raise client.fail(f"{option}: {err}", client.EXIT_USAGE) from None


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
    from herdbook.events.states import resolve_state_filter
    states = split(filter_state)
    try:
        resolve_state_filter(states)
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    approvals = split(filter_approval)
    bad = [a for a in approvals if a.upper() not in ("PENDING", "APPROVED", "REJECTED")]
    if bad:
        raise client.fail(f"unknown approval {bad[0]!r}; choose from pending, approved, "
                          "rejected", client.EXIT_USAGE)
    key = order_by.lstrip("-")
    if key not in ORDER_KEYS:
        raise client.fail(f"cannot order by {order_by!r}; choose from {', '.join(ORDER_KEYS)}",
                          client.EXIT_USAGE)
    import msgspec
    from msgspec.structs import replace

    from herdbook.api.messages import ListNodes, Page
    query = ListNodes(filter_approval=approvals, filter_state=states,
                      labels=parse_labels(labels), wide=output in (Format.json, Format.yaml))
    when = None if at is None else parse_at(at)
    # json in id order prints the control plane's objects as they came (the bytes the
    # rows would encode to again); everything else reads them as plain rows.
    verbatim = output is Format.json and key == "id" and when is None
    reply: Any = Page[msgspec.Raw] if verbatim else Page[dict[str, Any]]

    async def page(nc: Any, token: str | None) -> tuple[list[Any], str | None]:
        if when is None:
            now = await client.request(nc, "node.list", replace(query, next_token=token),
                                       reply)
            return now.items, now.next_token
        from herdbook.api.history_messages import NodesAt, PastNodesPage
        past = await client.request(
            nc, "node.list_at", NodesAt(
                at=when, filter_approval=approvals, filter_state=states,
                labels=query.labels, wide=query.wide, next_token=token),
            PastNodesPage, timeout=LOG_TIMEOUT)
        return past.items, past.next_token

    async def fetch(nc: Any) -> list[Any]:
        items: list[Any] = []
        token = None
        while True:
            found, token = await page(nc, token)
            items.extend(found)
            if not token:
                return items

    rows = client.run(server(ctx), fetch)
    if verbatim:
        render_json_items(rows[::-1] if order_by.startswith("-") else rows)
        return
    if output in (Format.table, Format.csv):
        for row in rows:
            age = row.get("heartbeat_age")
            row["heartbeat_ago"] = None if age is None else f"{age:.0f}s ago"
    rows.sort(key=lambda r: (r.get(key) is None, str(r.get(key) or "")),
              reverse=order_by.startswith("-"))
    render_rows(rows, LIST_COLUMNS + (WIDE_COLUMNS if wide else []), output)


@node_app.command("describe")
def describe(ctx: typer.Context,
             node_id: Annotated[str, typer.Argument(help="Node id or a unique prefix of one.")],
             output: Output = Format.table, at: At = None) -> None:
    """Everything known about one node, including the reason of its last approval decision.

    With --at, the node as the event log had it then (no heartbeat or resources)."""
    client.check_id(node_id)
    if at is None:
        from herdbook.api.messages import ById, NodeDescription
        render_object(client.plain(client.call(server(ctx), "node.describe",
                                               ById(id=node_id), NodeDescription)), output)
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


for name in ("approve", "reject", "delete"):
    node_app.command(name)(getattr(node_actions, name))


@node_app.command("add")
def add(ctx: typer.Context, node_id: NodeId, message: Reason = "",
        node_class: Annotated[str, typer.Option("--class", help="standard, sensitive or "
                                                "borrowed.")] = "standard",
        labels: Annotated[str | None, typer.Option("--labels", help="k=v[,k=v]")] = None) -> None:
    """Declare a node that has not reported yet: it is UNKNOWN until its agent starts."""
    if node_class not in ("standard", "sensitive", "borrowed"):
        raise client.fail(f"invalid class {node_class!r}; choose from standard, sensitive, "
                          "borrowed", client.EXIT_USAGE)
    from herdbook.api.messages import AddNode
    from herdbook.events.states import NodeClass
    send_command(ctx, "node.add", node_id, message, AddNode, node_class=NodeClass(node_class),
             labels=parse_labels(labels))


for name in ("cordon", "uncordon", "drain", "undrain", "disable", "enable"):
    node_app.command(name)(getattr(node_actions, name))


@node_app.command("reboot")
def reboot(ctx: typer.Context, node_id: NodeId, message: Reason = "") -> None:
    """Request a reboot of a DOWN or FAILED node: BOOTING until its boot check passes."""
    send_command(ctx, "node.reboot", node_id, message)


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
