"""`herd node ...`: list, describe, approve, reject, delete."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, console, render_object, render_rows

node_app = typer.Typer(help="See nodes and decide their membership (Bacalhau style).",
                       no_args_is_help=True)

LIST_COLUMNS = [("ID", "id"), ("TYPE", "type"), ("APPROVAL", "approval"), ("STATE", "state")]
WIDE_COLUMNS = [("HEALTH", "health"), ("CLASS", "class"), ("LABELS", "labels"),
                ("LAST HEARTBEAT", "heartbeat_ago"), ("GPUS", "gpus")]
ORDER_KEYS = ("id", "type", "approval", "state", "health", "class", "last_heartbeat", "gpus")

Output = Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml or csv.")]
Reason = Annotated[str, typer.Option("--message", "-m", help="Why: stored on the event.")]
NodeId = Annotated[str, typer.Argument(help="The node's id.")]


def _server(ctx: typer.Context) -> str:
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


def _split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v.strip()]


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
    labels: Annotated[str | None, typer.Option("--labels", help="Only nodes with these "
                                               "labels: k=v[,k=v].")] = None,
    order_by: Annotated[str, typer.Option("--order-by", help="Sort key: "
                                          + ", ".join(ORDER_KEYS) + "; prefix - to reverse.")] = "id",
) -> None:
    """List nodes; follows the API's pages, so any fleet size lists in full."""
    from herdbook.events.states import resolve_state_filter
    states = _split(filter_state)
    try:
        resolve_state_filter(states)
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    approvals = _split(filter_approval)
    bad = [a for a in approvals if a.upper() not in ("PENDING", "APPROVED", "REJECTED")]
    if bad:
        raise client.fail(f"unknown approval {bad[0]!r}; choose from pending, approved, "
                          "rejected", client.EXIT_USAGE)
    key = order_by.lstrip("-")
    if key not in ORDER_KEYS:
        raise client.fail(f"cannot order by {order_by!r}; choose from {', '.join(ORDER_KEYS)}",
                          client.EXIT_USAGE)
    payload: dict[str, Any] = {"filter_approval": approvals, "filter_state": states,
                               "labels": parse_labels(labels),
                               "wide": output in (Format.json, Format.yaml)}

    async def fetch(nc: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = await client.request(nc, "node.list", {**payload, "next_token": token})
            items.extend(page["items"])
            token = page.get("next_token")
            if not token:
                return items

    rows = client.run(_server(ctx), fetch)
    for row in rows:
        age = row.get("heartbeat_age")
        row_age = None if age is None else f"{age:.0f}s ago"
        if output in (Format.table, Format.csv):
            row["heartbeat_ago"] = row_age
    rows.sort(key=lambda r: (r.get(key) is None, str(r.get(key) or "")),
              reverse=order_by.startswith("-"))
    render_rows(rows, LIST_COLUMNS + (WIDE_COLUMNS if wide else []), output)


@node_app.command("describe")
def describe(ctx: typer.Context,
             node_id: Annotated[str, typer.Argument(help="Node id or a unique prefix of one.")],
             output: Output = Format.table) -> None:
    """Everything known about one node, including the reason of its last approval decision."""
    client.check_id(node_id)
    render_object(client.call(_server(ctx), "node.describe", {"id": node_id}), output)


def _command(ctx: typer.Context, route: str, node_id: str, reason: str) -> None:
    client.check_id(node_id)
    client.call(_server(ctx), route, {"id": node_id, "reason": reason, "actor": client.actor()})
    console.print("Ok")


@node_app.command("approve")
def approve(ctx: typer.Context, node_id: NodeId, message: Reason = "") -> None:
    """Approve a PENDING (or REJECTED) node so it can take part in the cluster."""
    _command(ctx, "node.approve", node_id, message)


@node_app.command("reject")
def reject(ctx: typer.Context, node_id: NodeId, message: Reason = "") -> None:
    """Reject a node; it stays REJECTED even if it registers again."""
    _command(ctx, "node.reject", node_id, message)


@node_app.command("delete")
def delete(ctx: typer.Context, node_id: NodeId, message: Reason = "") -> None:
    """Remove a node from the view; if its agent registers again it is PENDING."""
    _command(ctx, "node.delete", node_id, message)
