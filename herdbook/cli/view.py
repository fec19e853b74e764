"""`herd view rebuild`."""

from __future__ import annotations

import typer

from herdbook.cli import client
from herdbook.cli.output import console

view_app = typer.Typer(help="The SQLite views folded from the event stream.",
                       no_args_is_help=True)


@view_app.command("rebuild")
def rebuild(ctx: typer.Context) -> None:
    """Replay HERD_EVENTS from sequence 1 into a fresh view and swap it in (the running
    control plane keeps answering from the old view meanwhile)."""
    server = str(ctx.obj["server"])
    result = client.run(server, lambda nc: client.request(nc, "view.rebuild", {}, timeout=900))
    console.print(f"Ok: rebuilt {result['nodes']} nodes from {result['events']} events in "
                  f"{result['seconds']}s ({result['events_per_second']} events/s)", markup=False)
