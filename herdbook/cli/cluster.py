"""`herd nats cluster`: a local nats-server cluster to run herdbook on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import console

nats_app = typer.Typer(help="NATS helpers: a local nats-server cluster, the configuration "
                       "of an external one.", no_args_is_help=True)


def refuse_open_listener(host: str, insecure: bool, what: str, *, auth: bool | None) -> None:
    """Without credentials every client is trusted as any node or operator: such a server
    listens on loopback only, unless the operator says --insecure. ``auth`` None: the
    command has no --auth."""
    from herdbook.hosts import is_loopback
    if auth or is_loopback(host):
        return
    if not insecure:
        remedy = "--insecure" if auth is None else "--auth, or --insecure"
        raise client.fail(f"{what} {host} is not a loopback address and the server has no "
                          "credentials, so anyone who reaches it may act as any node or "
                          f"operator: pass {remedy} to listen there anyway", client.EXIT_USAGE)
    client.err_console.print(f"Warning: --insecure: listening on {host} without credentials",
                             markup=False)


@nats_app.command("cluster")
def cluster(
    directory: Annotated[Path, typer.Option(
        "--dir", help="Store dirs, configs and logs of the servers (<dir>/n1, ...); reused "
        "on the next start, so the streams survive.")] = Path("./.herd-cluster"),
    size: Annotated[int, typer.Option("--size", min=1, max=7, help="Number of servers "
                                      "(3 tolerates the loss of one).")] = 3,
    base_port: Annotated[int, typer.Option(
        "--base-port", min=1, max=65535 - 4010, help="Client ports from here (P, P+1, ...); "
        "routes at P+2000.., monitoring at P+4000..")] = 4222,
    host: Annotated[str, typer.Option("--host", help="Address every port binds to; "
                                      "not loopback: needs --insecure.")] = "127.0.0.1",
    insecure: Annotated[bool, typer.Option("--insecure", help="Listen on a non-loopback "
                                           "--host although the servers have no "
                                           "credentials.")] = False,
    name: Annotated[str, typer.Option("--name", help="Cluster name.")] = "herd",
    sync_interval: Annotated[str | None, typer.Option(
        "--sync-interval", help="JetStream fsync interval, e.g. `always` (durable against an "
        "OS crash, slower); default: the server's, 2m.")] = None,
) -> None:
    """Start SIZE nats-servers (n1..nN) with JetStream, routed to each other; print the
    client URLs once JetStream has a meta leader; stop them all on Ctrl-C / SIGTERM."""
    import signal
    import time

    from herdbook.cli.usage import usable_dir

    # This command runs the servers itself: it imports what runs them, here only.
    from herdbook.natsd.cluster import LocalCluster
    from herdbook.natsd.embedded import NatsServerError

    refuse_open_listener(host, insecure, "--host", auth=None)
    usable_dir(directory, "--dir")
    local = LocalCluster(directory, size=size, base_port=base_port, host=host, name=name,
                         sync_interval=sync_interval)

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        try:
            local.start()
            leader = local.wait_for_meta_leader()
        except NatsServerError as err:
            raise client.fail(str(err), client.EXIT_REFUSED) from None
        console.print(f"nats cluster [bold]{name}[/] is up: {size} servers, JetStream meta "
                      f"leader {leader}")
        for member in local.members:
            console.print(f"  {member.name}  {member.url}  routes :{member.route_port}  "
                          f"monitoring http://{host}:{member.monitor_port}  "
                          f"store {member.store_dir}", markup=False)
        console.print(local.url, markup=False)
        console.print(f"  control plane:  herd up --nats-url {local.url} -c herd.yaml  "
                      f"(herd.yaml: nats: {{replicas: {3 if size >= 3 else 1}}})", markup=False)
        console.print(f"  agents, CLI:    --server {local.url}", markup=False)
        console.print("  stop:           Ctrl-C")
        dead: set[str] = set()
        while True:
            time.sleep(1.0)
            for member in local.members:
                if not member.running and member.name not in dead:
                    dead.add(member.name)
                    client.err_console.print(f"Warning: {member.name} exited; see "
                                             f"{member.store_dir / 'nats-server.log'}",
                                             markup=False)
    except KeyboardInterrupt:
        pass
    finally:
        local.stop()
    console.print(f"nats cluster {name} stopped")


def _register_config() -> None:
    from herdbook.cli.nats_config import config
    nats_app.command("config")(config)


_register_config()
