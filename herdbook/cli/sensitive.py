"""Sensitive nodes: `herd node fingerprint|conformance`, `herd admin node` (its verbs,
wipe, come from the command table: ``herdbook.cli.node_actions``), `herd alloc requeue`."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client, node_actions
from herdbook.cli.jobs import alloc_app
from herdbook.cli.node import node_app
from herdbook.cli.node_args import NodeId, Reason, server
from herdbook.cli.output import Format, Output, echo, render_rows, safe

admin_app = typer.Typer(help="Operator actions that bypass the usual safety checks.",
                        no_args_is_help=True)
admin_node_app = typer.Typer(help="Nodes.", no_args_is_help=True)
admin_app.add_typer(admin_node_app, name="node")
node_actions.register(admin_node_app, ("admin", "node"))   # wipe: api/commands.py's table


@node_app.command("fingerprint")
def fingerprint(ctx: typer.Context, node_id: NodeId) -> None:
    """Ask the node's agent to recompute its conformance fingerprint now."""
    import asyncio

    import msgspec

    from herdbook.events.agent_requests import FingerprintReply, FingerprintRequest
    from herdbook.events.subjects import fingerprint_subject

    client.check_id(node_id)

    async def ask() -> FingerprintReply:
        nc = await client.connect(server(ctx))
        try:
            msg = await client.guarded_request(nc, fingerprint_subject(node_id),
                                               msgspec.json.encode(FingerprintRequest()),
                                               timeout=10)
        except typer.Exit:
            raise
        except Exception:  # noqa: BLE001
            raise client.fail(f"the agent of {node_id} does not answer",
                              client.EXIT_REFUSED) from None
        finally:
            await nc.close()
        try:
            return msgspec.json.decode(msg.data, type=FingerprintReply)
        except msgspec.DecodeError as err:
            raise client.fail(f"the agent of {node_id} sent a reply that does not decode: "
                              f"{err}", client.EXIT_REFUSED) from None

    reply = asyncio.run(ask())
    if not reply.ok:
        raise client.fail(safe(reply.error), client.EXIT_REFUSED)
    echo(f"Ok: {node_id} fingerprint {reply.fingerprint}")


@node_app.command("conformance")
def conformance(ctx: typer.Context, output: Output = Format.table) -> None:
    """The fleet grouped by conformance fingerprint, per pool: who drifted."""
    result = client.call(server(ctx), "node.conformance", {})
    render_rows(result["items"], [("POOL", "pool"), ("FINGERPRINT", "fingerprint"),
                                  ("NODES", "nodes"), ("DRIFT", "drift"),
                                  ("EXPECTED", "expected"), ("IDS", "node_ids")], output)


@alloc_app.command("requeue")
def requeue(ctx: typer.Context, alloc_id: Annotated[str, typer.Argument(
        help="A lost allocation's id or unique prefix.")], message: Reason = "") -> None:
    """Requeue an allocation lost on a sensitive node (never done automatically)."""
    from herdbook.api.messages import RequeueAlloc, RequeueResult
    client.check_id(alloc_id, "allocation id")
    result = client.call(server(ctx), "alloc.requeue",
                         RequeueAlloc(id=alloc_id, reason=message, actor=client.actor()),
                         RequeueResult)
    echo(f"Ok: {result.unchanged}" if result.unchanged
         else f"Ok: requeue approved, evaluation {result.eval_id}")
