"""`herd instance ...` and `herd pool ...`: what the providers run, and the pools."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console, render_object, render_rows

instance_app = typer.Typer(help="Instances: what a provider created (and you pay for).",
                           no_args_is_help=True)
pool_app = typer.Typer(help="Pools of instances kept within min_nodes..max_nodes.",
                       no_args_is_help=True)


INSTANCE_COLUMNS = [("ID", "id"), ("POOL", "pool"), ("PROVIDER", "provider"),
                    ("STATE", "state"), ("NODE", "node_id"), ("REASON", "reason")]
POOL_COLUMNS = [("NAME", "name"), ("PROVIDER", "provider"), ("MIN", "min_nodes"),
                ("MAX", "max_nodes"), ("TARGET", "target"), ("LIVE", "live"),
                ("AUTO-REPLACE", "auto_replace")]


@instance_app.command("list")
def instance_list(ctx: typer.Context, output: Output = Format.table,
                  pool: Annotated[str, typer.Option("--pool", help="Only this pool.")] = ""
                  ) -> None:
    """Every instance with its state: PROVISIONING, PENDING_REGISTRATION, RUNNING,
    TERMINATING, TERMINATED or FAILED."""
    from herdbook.api.messages import InstanceReply, ListInstances, Page
    result = client.call(str(ctx.obj["server"]), "instance.list", ListInstances(pool=pool),
                         Page[InstanceReply])
    render_rows(client.plain(result.items), INSTANCE_COLUMNS, output)


@instance_app.command("describe")
def instance_describe(ctx: typer.Context, instance_id: Annotated[str, typer.Argument(
        help="Instance id or a unique prefix.")], output: Output = Format.table) -> None:
    """One instance, with its provider reference and provider errors."""
    from herdbook.api.messages import ById, InstanceReply
    client.check_id(instance_id, "instance id")
    render_object(client.plain(client.call(str(ctx.obj["server"]), "instance.describe",
                                           ById(id=instance_id), InstanceReply)), output)


@pool_app.command("list")
def pool_list(ctx: typer.Context, output: Output = Format.table) -> None:
    """The pools of the config, with their bounds and live instances."""
    render_rows(client.call(str(ctx.obj["server"]), "pool.list", {})["items"], POOL_COLUMNS,
                output)


@pool_app.command("status")
def pool_status(ctx: typer.Context, pool: Annotated[str, typer.Argument(help="Pool name.")],
                output: Output = Format.table) -> None:
    """A pool's instances by state and its nodes by state."""
    from herdbook.api.messages import PoolByName
    client.check_id(pool, "pool name")
    render_object(client.call(str(ctx.obj["server"]), "pool.status", PoolByName(pool=pool)),
                  output)


@pool_app.command("scale")
def pool_scale(ctx: typer.Context, pool: Annotated[str, typer.Argument(help="Pool name.")],
               size: Annotated[int, typer.Argument(min=0, help="Instances to keep.")],
               message: Annotated[str, typer.Option("--message", "-m",
                                             help="Why (recorded in the event).")] = "",
        ) -> None:
    """Keep N instances (within min_nodes..max_nodes); scale-down takes cordoned, then idle
    nodes and drains busy ones before terminating them."""
    from herdbook.api.messages import ScalePool
    client.check_id(pool, "pool name")
    result = client.call(str(ctx.obj["server"]), "pool.scale",
                         ScalePool(pool=pool, size=size, reason=message, actor=client.actor()))
    console.print(f"Ok: {result['unchanged']}" if result.get("unchanged") else "Ok",
                  markup=False)
