"""The `herd` app: global options and one sub-app or command per noun (typer's layout);
each lives in its own module."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.agent import agent_app
from herdbook.cli.audit import audit_app
from herdbook.cli.cluster import nats_app
from herdbook.cli.creds import (
    CredsOption,
    PasswordOption,
    TlsCa,
    TlsCert,
    TlsKey,
    UserOption,
    checked_auth,
    creds_app,
)
from herdbook.cli.events import events_app
from herdbook.cli.fleet import instance_app, pool_app
from herdbook.cli.health import health_app
from herdbook.cli.jobs import alloc_app, eval_app, job_app
from herdbook.cli.node import node_app
from herdbook.cli.output import Format, console, render_object
from herdbook.cli.sensitive import admin_app
from herdbook.cli.sim import sim_command
from herdbook.cli.top import top
from herdbook.cli.up import up
from herdbook.cli.usage import PANELS, OneLineErrors
from herdbook.cli.view import view_app

app = typer.Typer(
    name="herd", no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors,
    help="herdbook: an event-sourced control plane for GPU and CPU compute-node fleets.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
START, FLEET, JOBS, HISTORY, OPERATE = PANELS
app.command(rich_help_panel=START)(up)
app.add_typer(agent_app, name="agent", rich_help_panel=START)
app.command("top", rich_help_panel=START)(top)
app.add_typer(node_app, name="node", rich_help_panel=FLEET)
app.add_typer(pool_app, name="pool", rich_help_panel=FLEET)
app.add_typer(instance_app, name="instance", rich_help_panel=FLEET)
app.add_typer(health_app, name="health", rich_help_panel=FLEET)
app.add_typer(admin_app, name="admin", rich_help_panel=FLEET)
app.add_typer(job_app, name="job", rich_help_panel=JOBS)
app.add_typer(eval_app, name="eval", rich_help_panel=JOBS)
app.add_typer(alloc_app, name="alloc", rich_help_panel=JOBS)
app.add_typer(events_app, name="events", rich_help_panel=HISTORY)
app.add_typer(audit_app, name="audit", rich_help_panel=HISTORY)
app.add_typer(view_app, name="view", rich_help_panel=HISTORY)
app.add_typer(creds_app, name="creds", rich_help_panel=OPERATE)
app.add_typer(nats_app, name="nats", rich_help_panel=OPERATE)
app.command("sim", rich_help_panel=OPERATE)(sim_command)


@app.callback()
def main_options(
    ctx: typer.Context,
    server: Annotated[str, typer.Option("--server", "-s", envvar="HERD_SERVER",
                                        help="NATS URL of the control plane.")] = client.DEFAULT_SERVER,
    creds: CredsOption = None, user: UserOption = None, password: PasswordOption = None,
    tls_ca: TlsCa = None, tls_cert: TlsCert = None, tls_key: TlsKey = None,
) -> None:
    from herdbook.credentials import NatsAuth
    auth = NatsAuth(user, password, creds, tls_ca, tls_cert, tls_key)
    source = ctx.get_parameter_source("server")
    default = source is None or source.name == "DEFAULT"
    if creds:
        # The creds file names the server it was issued for: used unless --server says.
        server = checked_auth(auth, None if default else server) or server
    client.set_auth(auth)
    ctx.obj = {"server": server, "auth": auth, "server_default": default and not creds}


@app.command(rich_help_panel=START)
def status(
    ctx: typer.Context,
    output: Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml, csv.")] = Format.table,
) -> None:
    """The control plane answering: node count, projector position and lag, dead letters,
    dropped heartbeat replays, liveness detections."""
    render_object(client.call(str(ctx.obj["server"]), "status", {}), output)


@app.command(rich_help_panel=OPERATE)
def version() -> None:
    """Print herdbook's version."""
    import herdbook
    console.print(herdbook.__version__)


def main() -> None:
    app()

