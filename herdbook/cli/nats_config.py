"""`herd nats config --auth`: the configuration of an external nats-server cluster with
every user and permission herdbook needs (``natsd.cluster_config``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import console


def config(
    auth: Annotated[bool, typer.Option("--auth", help="Generate users and permissions "
                                       "(required: a cluster without users lets anyone act "
                                       "as any node).")] = False,
    routes: Annotated[str, typer.Option(
        "--cluster-routes", help="One nats-route://HOST:PORT per server, comma-separated: "
        "where each server's route listens, as the others dial it.")] = "",
    out: Annotated[Path, typer.Option("--out", help="Directory for n1.conf.., users.json, "
                                      "users.conf, the control plane's creds.")]
    = Path("./herd-nats"),
    host: Annotated[str, typer.Option("--host", help="Address the servers' client and "
                                      "route ports bind to.")] = "0.0.0.0",
    port: Annotated[int, typer.Option("--port", min=1, max=65535,
                                      help="Client port.")] = 4222,
    monitor_host: Annotated[str, typer.Option(
        "--monitor-host", help="Address of the monitoring port (/healthz).")] = "127.0.0.1",
    monitor_port: Annotated[int, typer.Option("--monitor-port", min=1, max=65535,
                                              help="Monitoring port.")] = 8222,
    store_dir: Annotated[str, typer.Option(
        "--store-dir", help="JetStream stores, <store-dir>/<server name>.")] = "/var/lib/nats",
    name: Annotated[str, typer.Option("--name", help="Cluster name.")] = "herd",
    tls_cert: Annotated[str | None, typer.Option("--tls-cert", help="Server certificate "
                                                 "(clients and routes).")] = None,
    tls_key: Annotated[str | None, typer.Option("--tls-key", help="Its private key.")] = None,
    tls_ca: Annotated[str | None, typer.Option("--tls-ca", help="CA that clients verify "
                                               "the servers with.")] = None,
    liveness_shards: Annotated[int, typer.Option(
        "--liveness-shards", help="The control plane's lifecycle.liveness_shards: map the "
        "heartbeats onto that many shards, as the embedded server does.")] = 1,
) -> None:
    """Write nats-server configurations for a cluster: one file per server (n1.conf..),
    all including users.conf, which holds the control plane's user; issue agents and
    operators with `herd creds ... --config-dir DIR`, revoke with `herd creds revoke`."""
    from herdbook.cli.usage import usable_dir
    from herdbook.credentials import CredsFile, write_creds
    from herdbook.natsd.cluster_config import (
        CONTROL_CREDS,
        ClusterConfigError,
        Layout,
        write_cluster,
    )
    from herdbook.natsd.users import CONTROL_USER, UserRegistry, UsersError

    if not auth:
        raise client.fail("herd nats config writes a cluster with users only: pass --auth "
                          "(for a trial without users on this machine: herd nats cluster)",
                          client.EXIT_USAGE)
    usable_dir(out, "--out")
    layout = Layout(routes=[r for r in routes.split(",") if r.strip()], listen_host=host,
                    port=port, monitor_host=monitor_host, monitor_port=monitor_port,
                    store_dir=store_dir, cluster_name=name, tls_cert=tls_cert,
                    tls_key=tls_key, tls_ca=tls_ca, liveness_shards=liveness_shards)
    try:
        files, urls = write_cluster(out, layout)
        control = next(u for u in UserRegistry(out).users() if u.user == CONTROL_USER)
        creds = out / CONTROL_CREDS
        write_creds(creds, CredsFile(user=control.user, password=control.password,
                                     url=",".join(urls), kind="control"))
    except ClusterConfigError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    except (UsersError, OSError) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    url = ",".join(urls)
    say = console.print
    say(f"Ok: nats-server configuration of cluster {name} in {out} "
        f"({len(files)} servers; users in {out / 'users.conf'})", markup=False)
    for path, member_url in zip(files, urls, strict=True):
        say(f"  {member_url}:  nats-server -c {path.name}   "
            f"(copy {path.name} and users.conf to its host)", markup=False)
    say(f"  control plane: herd up --nats-url {url} --creds {creds} --auth -c herd.yaml  "
        f"(herd.yaml: nats: {{replicas: {min(len(files), 3)}}})", markup=False)
    say(f"  an agent:      herd creds agent NODE --config-dir {out} --host HOST", markup=False)
    say(f"  an operator:   herd creds operator NAME [--reader] --config-dir {out}",
        markup=False)
    say("  after each:    copy users.conf to every server, then nats-server --signal reload "
        "(SIGHUP to its pid)", markup=False)
