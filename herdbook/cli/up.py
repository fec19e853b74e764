"""`herd up`: run the control plane. The one CLI module that imports the composition
root (``herdbook.control``), and only inside the command, so every other command and
`herd --help` load none of the server."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from herdbook.cli import client
from herdbook.cli.cluster import refuse_open_listener
from herdbook.cli.creds import checked_auth
from herdbook.cli.output import console
from herdbook.cli.usage import log_level_option, plain_files, setup_logging, usable_dir
from herdbook.cli.usage import port as check_port

DEFAULT_HTTP_PORT = 8641


def up(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="YAML config file [default: the first of ./herd.yaml, "
        "/etc/herd/herd.yaml that exists; HERD_CONFIG_PATH replaces that list].")] = None,
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="Where the view and the "
                                                 "embedded NATS store live [default: ./.herd].")] = None,
    nats_port: Annotated[int | None, typer.Option("--nats-port", min=1, max=65535,
                                                  help="Port of the embedded nats-server, "
                                                  "on nats.host [default: 4222].")] = None,
    nats_url: Annotated[str | None, typer.Option("--nats-url", help="Use this NATS (>= 2.11, "
                                                 "JetStream on) instead of starting one.")] = None,
    auto_approve: Annotated[bool, typer.Option("--auto-approve", help="Approve new compute "
                                               "nodes as they register (approval.auto_approve"
                                               "); with --demo, the demo fleet takes jobs at "
                                               "once.")] = False,
    demo: Annotated[int, typer.Option("--demo", min=0, help="Also run N simulated agents "
                                      "with fake GPUs.")] = 0,
    node_id: Annotated[str | None, typer.Option("--node-id", help="ID of this control plane's "
                                                "requester node.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", min=0, max=65535, help="Serve Prometheus GET /metrics on this port "
        "(0: off) [default: 0].")] = None,
    metrics_host: Annotated[str | None, typer.Option(
        "--metrics-host", help="Address /metrics binds to [default: 127.0.0.1].")] = None,
    http_port: Annotated[int | None, typer.Option(
        "--http-port", min=0, max=65535, help="Serve the HTTP API and the web console on "
        "this port (0: off) [default: 8641].")] = None,
    http_host: Annotated[str | None, typer.Option(
        "--http-host", help="Address the HTTP API binds to; not loopback only with --auth "
        "[default: 127.0.0.1].")] = None,
    auth: Annotated[bool, typer.Option("--auth", help="Embedded nats-server: require "
                                       "credentials (`herd creds agent|operator`).")] = False,
    insecure: Annotated[bool, typer.Option("--insecure", help="Without --auth, let the "
                                           "embedded nats-server listen on a non-loopback "
                                           "nats.host: anyone who reaches it may act as any "
                                           "node or operator.")] = False,
    creds: Annotated[str | None, typer.Option("--creds", help="With --nats-url: a creds "
                                              "file to connect with.")] = None,
    tls_ca: Annotated[str | None, typer.Option("--tls-ca", help="With --nats-url: CA file "
                                               "to verify the server with.")] = None,
    tls_cert: Annotated[str | None, typer.Option("--tls-cert", help="With --nats-url: client "
                                                 "certificate file.")] = None,
    tls_key: Annotated[str | None, typer.Option("--tls-key", help="With --nats-url: client "
                                                "private key file.")] = None,
    log_level: Annotated[str, log_level_option("debug, info, warning.")] = "info",
) -> None:
    """Run the control plane: NATS (embedded unless --nats-url), streams, projector,
    reactors and the API. Stops cleanly on Ctrl-C / SIGTERM."""
    import asyncio
    import os

    import msgspec

    from herdbook.config import ConfigError, load_config
    from herdbook.config_path import find_config
    from herdbook.control.errors import ControlPlaneFailed, StartupError
    from herdbook.control.up import run

    config, config_from = find_config(config, os.environ)
    try:
        cfg = load_config(config)
    except ConfigError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if node_id is not None:
        client.check_id(node_id)
    tls = cfg.nats.tls
    nats_cfg = msgspec.structs.replace(
        cfg.nats, url=nats_url or cfg.nats.url,
        port=nats_port if nats_port is not None else cfg.nats.port,
        auth=auth or cfg.nats.auth, creds=creds or cfg.nats.creds,
        tls=msgspec.structs.replace(tls, ca=tls_ca or tls.ca, cert=tls_cert or tls.cert,
                                    key=tls_key or tls.key))
    if not nats_cfg.url:
        refuse_open_listener(nats_cfg.host, insecure, "nats.host", auth=nats_cfg.auth)
        check_port(nats_cfg.port, "nats.port")
    else:
        from herdbook.credentials import NatsAuth
        client.check_server(nats_cfg.url, "--nats-url")
        checked_auth(NatsAuth(creds=nats_cfg.creds, tls_ca=nats_cfg.tls.ca,
                              tls_cert=nats_cfg.tls.cert, tls_key=nats_cfg.tls.key), nats_cfg.url)
    cfg_http_port = cfg.http.port
    cfg = msgspec.structs.replace(
        cfg, nats=nats_cfg, data_dir=data_dir or cfg.data_dir, node_id=node_id or cfg.node_id,
        approval=msgspec.structs.replace(cfg.approval,
                                         auto_approve=auto_approve or cfg.approval.auto_approve),
        metrics=msgspec.structs.replace(
            cfg.metrics, port=cfg.metrics.port if metrics_port is None else metrics_port,
            host=metrics_host or cfg.metrics.host),
        http=msgspec.structs.replace(
            cfg.http, host=http_host or cfg.http.host,
            port=http_port if http_port is not None else (
                cfg.http.port if cfg.http.port is not None else DEFAULT_HTTP_PORT)))
    if cfg.http.port:
        from herdbook.web.auth import check_bind
        why = check_bind(cfg.http.host, cfg.nats.auth)
        if why is not None:
            raise client.fail(why, client.EXIT_USAGE)
    from herdbook.agent.state import SEQ_FILE
    where = "--data-dir" if data_dir else "data_dir"
    usable_dir(cfg.data_dir, where)
    usable_dir(Path(cfg.data_dir) / "nats", where)
    plain_files(cfg.data_dir, (SEQ_FILE, "herd.lock", "view.db"), where)
    setup_logging(log_level)

    def ready(info: dict[str, object]) -> None:
        lines: list[str] = []
        say = lines.append
        where = "embedded nats-server" if info["embedded"] else "NATS"
        say(f"herd control plane [bold]{info['node_id']}[/] is up "
            f"({info['nodes']} nodes in the view)")
        say(f"  {where} listening on {info['nats_url']}, data in {info['data_dir']}")
        say(escape(f"  config:            {config_from}"))
        say(escape(f"  health policy:     {cfg.health.policy or 'built-in default'}"))
        if info.get("auth"):
            say("  credentials on:    every client needs its own user "
                f"(`herd creds agent|operator --data-dir {info['data_dir']}`)")
            say(f"  connect an agent:  herd creds agent node-1 --data-dir "
                f"{info['data_dir']}, then herd agent --node-id node-1 "
                "--creds agent-node-1.creds --fake-gpus 8")
            say(f"  list the nodes:    herd creds operator --data-dir "
                f"{info['data_dir']}, then herd --creds op-admin.creds node list")
        else:
            say(f"  connect an agent:  herd agent --server {info['nats_url']} "
                "--node-id node-1 --fake-gpus 8")
            say(f"  list the nodes:    herd --server {info['nats_url']} node list")
            say(f"  watch the fleet:   herd --server {info['nats_url']} top")
        if demo:
            herd = ("herd --creds op-admin.creds" if info.get("auth")
                    else f"herd --server {info['nats_url']}")
            say(f"  demo fleet:        {demo} simulated nodes (demo-000...), "
                + ("approved as they register" if cfg.approval.auto_approve else
                   f"PENDING until approved: {herd} node approve -l demo=true"))
        if info.get("http_url"):
            say(escape(f"  console, HTTP API: {info['http_url']} (OpenAPI: "
                       f"{info['http_url']}openapi.json)"))
        elif info.get("http_off"):
            say(escape(f"  console, HTTP API: off: {info['http_off']}"))
        if info.get("metrics_url"):
            say(f"  Prometheus:        {info['metrics_url']}")
        say("  stop:              Ctrl-C")
        # one write: a reader that sees "is up" sees the whole block, the URL included
        console.print("\n".join(lines))

    try:
        asyncio.run(run(cfg, demo=demo, on_ready=ready,
                        http_best_effort=http_port is None and cfg_http_port is None))
    except (StartupError, ControlPlaneFailed) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    except KeyboardInterrupt:
        pass
    console.print("herd control plane stopped")
