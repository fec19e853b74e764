"""`herd breaker status|reset`: the fleet-wide circuit breaker that holds automatic
actions once too much of the fleet or of a pool was taken out automatically."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console, render_object, render_rows

breaker_app = typer.Typer(help="The circuit breaker on automatic actions (UNHEALTHY, "
                               "auto-replace, conformance drains).", no_args_is_help=True)

SCOPE_COLUMNS = [("SCOPE", "scope"), ("OPEN", "open"), ("TAKEN-OUT", "taken_out"),
                 ("SIZE", "size"), ("LIMIT", "limit"), ("TRIPPED", "tripped_at")]


def _summary(status: dict[str, Any]) -> dict[str, Any]:
    held = status.get("held", [])
    return {"open": status["open"], "max_share": status["max_share"],
            "window_s": status["window_s"], "min_nodes": status["min_nodes"],
            "held": len(held), "scopes": status["scopes"],
            "held_nodes": ", ".join(f"{h['node']} ({h['kind']})" for h in held) or "-"}


@breaker_app.command("status")
def breaker_status(ctx: typer.Context, output: Output = Format.table) -> None:
    """Each scope (the fleet, each pool): open or closed, nodes taken out automatically
    within the window against its limit; the nodes whose actions are held."""
    status = client.call(str(ctx.obj["server"]), "breaker.status", {})
    if output is Format.table:
        render_rows(status["scopes"], SCOPE_COLUMNS, output)
        held = status.get("held", [])
        console.print(f"open: {'yes' if status['open'] else 'no'}; held since the last "
                      f"reset: {len(held)}")
        for scope in status["scopes"]:
            if scope["reason"]:
                console.print(f"{scope['scope']}: {scope['reason']}", markup=False)
    else:
        render_object(status, output)


@breaker_app.command("reset")
def breaker_reset(
        ctx: typer.Context,
        reason: Annotated[str, typer.Option("--reason", "-m",
                                            help="Why it is safe to go on (recorded).")],
        scope: Annotated[str, typer.Option(
            "--scope", help="fleet or pool:<name>; default: every scope.")] = "",
        output: Output = Format.table) -> None:
    """Close the breaker (one scope, or every scope): automatic actions go on, counted
    from now. Held actions are not replayed: the next report or round decides again."""
    from herdbook.api.messages import ResetBreaker
    if not reason.strip():
        raise client.fail("--reason must say why", client.EXIT_USAGE)
    if scope and scope != "fleet" and not scope.startswith("pool:"):
        raise client.fail(f"--scope: {scope!r} is not fleet or pool:<name>", client.EXIT_USAGE)
    if scope.startswith("pool:"):
        client.check_id(scope.removeprefix("pool:"), "pool name")
    result = client.call(str(ctx.obj["server"]), "breaker.reset",
                         ResetBreaker(scope=scope, reason=reason, actor=client.actor()))
    if output is Format.table:
        console.print(f"Reset: {result['reset']}")
    else:
        render_object(result, output)
