"""`herd audit ...`: who did what, from the event log, and whether the log is intact."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
import typer

from herdbook.cli import client
from herdbook.cli.node import LOG_TIMEOUT
from herdbook.cli.output import Format, Output, console, echo, render_object, render_rows

audit_app = typer.Typer(help="The audit trail: actions on nodes and jobs, and the "
                        "nodes' hash chains.", no_args_is_help=True)

AUDIT_COLUMNS = [("TIME", "at"), ("ACTOR", "actor"), ("ACTION", "action"),
                 ("NODE", "node"), ("TARGET", "target"), ("REASON", "reason")]

NodeOption = Annotated[str | None, typer.Option("--node", help="Only this node (id or a "
                                                "unique prefix of one).")]


def _ask(ctx: typer.Context, route: str, request: msgspec.Struct, reply: type[Any]) -> Any:
    """The reply as the JSON objects the renderers take."""
    return client.plain(client.run(str(ctx.obj["server"]), lambda nc: client.request(
        nc, route, request, reply, timeout=LOG_TIMEOUT)))


@audit_app.command("list")
def list_actions(
    ctx: typer.Context,
    node: NodeOption = None,
    since: Annotated[str | None, typer.Option("--since", help="From this stream sequence "
                                              "(e.g. 1200) or time (ISO-8601, or ago: 10m, "
                                              "2h, 1d).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000,
                                       help="The newest N entries.")] = 1000,
    output: Output = Format.table,
) -> None:
    """Who did what, when and why: node, allocation and job actions.

    Every node event but info updates and wipe steps, allocations lost for good (not
    requeued), job (de)registrations; with --node, that node's events and lost
    allocations."""
    from herdbook.api.history_messages import AuditList, AuditPage
    request = AuditList(limit=limit, node_id="" if node is None else client.check_id(node),
                        since=None if since is None else since_time(ctx, since))
    result = _ask(ctx, "audit.list", request, AuditPage)
    if result.get("omitted") and output is Format.table:
        console.print(f"({result['omitted']} older entries omitted: --limit, --since)",
                      markup=False)
    render_rows(result["items"], AUDIT_COLUMNS, output)


def since_time(ctx: typer.Context, text: str) -> datetime:
    """--since as the API takes it: a time, or the time the event at a sequence was
    stored (the audit trail is kept by time)."""
    from herdbook.cli.events import parse_since, stored_at
    since = parse_since(text)
    if isinstance(since, datetime):
        return since
    return client.run(str(ctx.obj["server"]), lambda nc: stored_at(nc, since))


@audit_app.command("verify")
def verify(ctx: typer.Context, node: NodeOption = None, output: Output = Format.table) -> None:
    """Check the nodes' hash chains; exit code 1 if one is broken.

    Every node event's prev_hash must be the SHA-256 of the node's last vouched event
    before it (none for its first); the first broken link per node is named. A message
    the subject does not vouch for (undecodable or forged: dead-lettered) is listed as
    REFUSED with its sequence and reason and breaks nothing; an event whose successor
    chained onto such a message instead of onto it is listed as UNANCHORED (a change to
    it would not be seen). Reads the log."""
    from herdbook.api.history_messages import AuditVerify, ChainReport
    request = AuditVerify(node_id="" if node is None else client.check_id(node))
    report = _ask(ctx, "audit.verify", request, ChainReport)
    if output is not Format.table:
        render_object(report, output)
    else:
        if report["ok"]:
            refused = report["refused_total"]
            echo(f"OK: {report['events_checked']} events of {report['nodes_checked']} "
                 "nodes verified" + (f"; {refused} refused message{'s' * (refused != 1)} "
                                     "not part of the chain" if refused else ""))
        for link in report["broken"]:
            echo(f"BROKEN: node {link['node_id']} at seq {link['seq']} (event "
                 f"{link['event']}): prev_hash {link['found']} expected {link['expected']}")
        for msg in report["refused"]:
            echo(f"REFUSED: seq {msg['seq']} on {msg['subject']}: {msg['reason']}")
        if (more := report["refused_total"] - len(report["refused"])) > 0:
            echo(f"REFUSED: {more} more not listed")
        for gap in report["unanchored"]:
            echo(f"UNANCHORED: seq {gap['seq']} of node {gap['node_id']}: seq "
                 f"{gap['next_seq']} chained onto refused seq {gap['refused_seq']} "
                 "instead, so a change to it would not be seen")
        if (more := report["unanchored_total"] - len(report["unanchored"])) > 0:
            echo(f"UNANCHORED: {more} more not listed")
    if not report["ok"]:
        raise typer.Exit(code=client.EXIT_REFUSED)
