"""The `herd` app: global options, `herd up`, `herd agent`, and the noun sub-apps."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.audit import audit_app
from herdbook.cli.cluster import nats_app, refuse_open_listener
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
from herdbook.cli.jobs import alloc_app, eval_app, job_app
from herdbook.cli.node import node_app, parse_labels
from herdbook.cli.output import Format, console, echo, render_object, safe
from herdbook.cli.sensitive import admin_app
from herdbook.cli.sim import sim_command
from herdbook.cli.top import top
from herdbook.cli.usage import (
    OneLineErrors,
    log_level_option,
    plain_files,
    readable_file,
    usable_dir,
    writable_file,
)
from herdbook.cli.usage import port as check_port
from herdbook.cli.view import view_app

app = typer.Typer(
    name="herd", no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors,
    help="herdbook: an event-sourced control plane for GPU and CPU compute-node fleets.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(node_app, name="node")
app.add_typer(events_app, name="events")
app.add_typer(view_app, name="view")
app.add_typer(instance_app, name="instance")
app.add_typer(pool_app, name="pool")
app.add_typer(job_app, name="job")
app.add_typer(eval_app, name="eval")
app.add_typer(alloc_app, name="alloc")
app.add_typer(admin_app, name="admin")
app.command("sim")(sim_command)
app.command("top")(top)
app.add_typer(audit_app, name="audit")
app.add_typer(nats_app, name="nats")
app.add_typer(creds_app, name="creds")


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


def _logging(level: str) -> None:
    logging.basicConfig(level=level.upper(),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")


@app.command()
def up(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file.")] = None,
    data_dir: Annotated[str | None, typer.Option("--data-dir", help="Where the view and the "
                                                 "embedded NATS store live [default: ./.herd].")] = None,
    nats_port: Annotated[int | None, typer.Option("--nats-port", min=1, max=65535,
                                                  help="Port of the embedded nats-server, "
                                                  "on nats.host [default: 4222].")] = None,
    nats_url: Annotated[str | None, typer.Option("--nats-url", help="Use this NATS (>= 2.11, "
                                                 "JetStream on) instead of starting one.")] = None,
    auto_approve: Annotated[bool, typer.Option("--auto-approve", help="Approve new compute "
                                               "nodes as they register.")] = False,
    demo: Annotated[int, typer.Option("--demo", min=0, help="Also run N simulated agents "
                                      "with fake GPUs.")] = 0,
    node_id: Annotated[str | None, typer.Option("--node-id", help="ID of this control plane's "
                                                "requester node.")] = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", min=0, max=65535, help="Serve Prometheus GET /metrics on this port "
        "(0: off) [default: 0].")] = None,
    metrics_host: Annotated[str | None, typer.Option(
        "--metrics-host", help="Address /metrics binds to [default: 127.0.0.1].")] = None,
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

    import msgspec

    from herdbook.config import ConfigError, load_config
    from herdbook.control.errors import ControlPlaneFailed, StartupError
    from herdbook.control.up import run

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
    cfg = msgspec.structs.replace(
        cfg, nats=nats_cfg, data_dir=data_dir or cfg.data_dir, node_id=node_id or cfg.node_id,
        approval=msgspec.structs.replace(cfg.approval,
                                         auto_approve=auto_approve or cfg.approval.auto_approve),
        metrics=msgspec.structs.replace(
            cfg.metrics, port=cfg.metrics.port if metrics_port is None else metrics_port,
            host=metrics_host or cfg.metrics.host))
    from herdbook.agent.state import SEQ_FILE
    where = "--data-dir" if data_dir else "data_dir"
    usable_dir(cfg.data_dir, where)
    usable_dir(Path(cfg.data_dir) / "nats", where)
    plain_files(cfg.data_dir, (SEQ_FILE, "herd.lock", "view.db", "health.position"), where)
    _logging(log_level)

    def ready(info: dict[str, object]) -> None:
        where = "embedded nats-server" if info["embedded"] else "NATS"
        console.print(f"herd control plane [bold]{info['node_id']}[/] is up "
                      f"({info['nodes']} nodes in the view)")
        console.print(f"  {where} listening on {info['nats_url']}, data in {info['data_dir']}")
        if info.get("auth"):
            console.print("  credentials on:    every client needs its own user "
                          f"(`herd creds agent|operator --data-dir {info['data_dir']}`)")
            console.print(f"  connect an agent:  herd creds agent node-1 --data-dir "
                          f"{info['data_dir']}, then herd agent --node-id node-1 "
                          "--creds agent-node-1.creds --fake-gpus 8")
            console.print(f"  list the nodes:    herd creds operator --data-dir "
                          f"{info['data_dir']}, then herd --creds op-admin.creds node list")
        else:
            console.print(f"  connect an agent:  herd agent --server {info['nats_url']} "
                          "--node-id node-1 --fake-gpus 8")
            console.print(f"  list the nodes:    herd --server {info['nats_url']} node list")
            console.print(f"  watch the fleet:   herd --server {info['nats_url']} top")
        if info.get("metrics_url"):
            console.print(f"  Prometheus:        {info['metrics_url']}")
        console.print("  stop:              Ctrl-C")

    try:
        asyncio.run(run(cfg, demo=demo, on_ready=ready))
    except (StartupError, ControlPlaneFailed) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    except KeyboardInterrupt:
        pass
    console.print("herd control plane stopped")


agent_app = typer.Typer(help="Run the compute-node agent (`herd agent --node-id ...`), or "
                        "inject faults into one (`herd agent inject ...`).")
app.add_typer(agent_app, name="agent")


@agent_app.callback(invoke_without_command=True)
def agent(
    ctx: typer.Context,
    server: Annotated[str | None, typer.Option("--server", "-s", envvar="HERD_SERVER",
                                               help="NATS URL [default: the global --server, "
                                               "nats://127.0.0.1:4222]")] = None,
    node_id: Annotated[str | None, typer.Option("--node-id", help="[default: hostname]")] = None,
    state_dir: Annotated[str, typer.Option("--state-dir", help="Sentinel, heartbeat "
                                           "sequence and allocation logs live here.")] = "./.herd-agent",
    state_file: Annotated[str | None, typer.Option(
        "--state-file", help="The running allocations, kept so that a restarted agent "
        "reattaches to them (default: <state-dir>/agent-state.json).")] = None,
    labels: Annotated[str | None, typer.Option("--labels", help="k=v[,k=v]")] = None,
    node_class: Annotated[str, typer.Option("--class", help="standard, sensitive or "
                                            "borrowed.")] = "standard",
    heartbeat_interval: Annotated[float, typer.Option("--heartbeat-interval", min=0.05,
                                                      help="Seconds.")] = 10.0,
    info_interval: Annotated[float, typer.Option("--info-interval", min=0.05, help="Seconds "
                                                 "between node-info checks.")] = 60.0,
    resource_interval: Annotated[float, typer.Option("--resource-interval", min=0.05,
                                                     help="Seconds between resource updates.")] = 30.0,
    fake_gpus: Annotated[int | None, typer.Option("--fake-gpus", min=0, help="Simulate N GPUs "
                                                  "instead of reading NVML.")] = None,
    instance_id: Annotated[str | None, typer.Option("--instance-id", envvar="HERD_INSTANCE_ID",
                                                    help="Provider instance this node runs on.")] = None,
    boot_retry_interval: Annotated[float, typer.Option(
        "--boot-retry-interval", min=0.0, help="Seconds between boot check attempts.")] = 10.0,
    fake_allocs: Annotated[int, typer.Option("--fake-allocs", min=0, hidden=True,
                                             help="Running allocations to report.")] = 0,
    health_interval: Annotated[float, typer.Option("--health-interval", min=0.05,
                                                   help="Seconds between health checks.")] = 60.0,
    fingerprint_interval: Annotated[str, typer.Option(
        "--fingerprint-interval", help="Recompute the conformance fingerprint this often "
        "(e.g. 6h, 30m); also on request.")] = "6h",
    wipe_config: Annotated[str | None, typer.Option(
        "--wipe-config", help="YAML with the wipe steps of a sensitive node: steps: "
        "[{name, command, timeout}] (default: GPU memory clear, NVMe secure erase, RAM scrub, "
        "reboot into a clean image; fakes with --fake-gpus).")] = None,
    creds: CredsOption = None, user: UserOption = None, password: PasswordOption = None,
    tls_ca: TlsCa = None, tls_cert: TlsCert = None, tls_key: TlsKey = None,
    log_level: Annotated[str, log_level_option()] = "info",
) -> None:
    """Run the compute-node agent: register, boot check, heartbeat, health checks, info and
    resource updates, and run this node's allocations. Stopping the agent leaves them
    running; the next agent with the same state dir reattaches to them."""
    from herdbook.credentials import NatsAuth
    base: NatsAuth = ctx.obj["auth"]
    auth = NatsAuth(user or base.user, password or base.password, creds or base.creds,
                    tls_ca or base.tls_ca, tls_cert or base.tls_cert, tls_key or base.tls_key)
    client.set_auth(auth)
    if server:
        ctx.obj["server"] = server
    elif creds and ctx.obj["server_default"]:
        ctx.obj["server"] = checked_auth(auth, None) or ctx.obj["server"]
    checked_auth(auth, ctx.obj["server"])
    if ctx.invoked_subcommand is not None:
        return
    client.check_server(str(ctx.obj["server"]))
    import asyncio

    from herdbook.agent.main import AgentOptions, default_node_id, run_agent
    from herdbook.events.states import NodeClass

    try:
        cls = NodeClass(node_class)
    except ValueError:
        raise client.fail(f"invalid class {node_class!r}; choose from standard, sensitive, "
                          "borrowed", client.EXIT_USAGE) from None
    nid = client.check_id(node_id or default_node_id())
    if instance_id is not None:
        client.check_id(instance_id, "instance id")
    from herdbook.agent.wipe import WipeConfigError, load_steps
    from herdbook.durations import parse_duration
    try:
        every = float(parse_duration(fingerprint_interval))
        load_steps(wipe_config, fake_gpus is not None)
    except (ValueError, WipeConfigError) as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if every <= 0:
        raise client.fail("--fingerprint-interval must be positive", client.EXIT_USAGE)
    from herdbook.agent.state import SENTINEL, SEQ_FILE
    from herdbook.agent.workload_state import STATE_FILE
    usable_dir(state_dir, "--state-dir")
    plain_files(state_dir, (SEQ_FILE, SENTINEL) + (() if state_file else (STATE_FILE,)),
                "--state-dir")
    if state_file:
        writable_file(state_file, "--state-file")
    options = AgentOptions(
        server=str(ctx.obj["server"]), node_id=nid, state_dir=state_dir,
        labels=parse_labels(labels), node_class=cls, heartbeat_interval=heartbeat_interval,
        info_interval=info_interval, resource_interval=resource_interval, fake_gpus=fake_gpus,
        instance_id=instance_id, boot_retry_interval=boot_retry_interval,
        fake_allocs=fake_allocs, health_interval=health_interval, state_file=state_file,
        fingerprint_interval=every, wipe_config=wipe_config, auth=auth)
    _logging(log_level)
    try:
        asyncio.run(run_agent(options))
    except KeyboardInterrupt:
        pass


@agent_app.command("inject")
def inject(
    ctx: typer.Context,
    fault: Annotated[str, typer.Argument(help="xid, thermal, ecc-dbe, ecc-sbe, nvlink, pcie "
                                         "or clear.")],
    value: Annotated[float | None, typer.Argument(help="XID code, temperature °C or error "
                                                  "count.")] = None,
    node: Annotated[str, typer.Option("--node", help="The agent's node id.")] = "",
    gpu: Annotated[int, typer.Option("--gpu", min=0, help="GPU index.")] = 0,
) -> None:
    """Inject a GPU fault into a running agent that uses fake GPUs, e.g.
    `herd agent inject --node gpu-1 xid 79 --gpu 3`; the agent reports it at once."""
    from typing import cast

    import msgspec

    from herdbook.events.agent_requests import FAULTS, Fault, InjectReply, InjectRequest
    from herdbook.events.subjects import inject_subject
    if not node:
        raise client.fail("--node is required", client.EXIT_USAGE)
    client.check_id(node)
    if fault not in FAULTS:
        raise client.fail(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}",
                          client.EXIT_USAGE)
    if fault == "xid" and value is None:
        raise client.fail("xid needs a code, e.g. `xid 79`", client.EXIT_USAGE)

    request = InjectRequest(fault=cast(Fault, fault), gpu=gpu, value=value)

    async def send(nc: object) -> InjectReply:
        import nats.errors
        try:
            msg = await nc.request(inject_subject(node),  # type: ignore[attr-defined]
                                   msgspec.json.encode(request), timeout=10)
        except nats.errors.NoRespondersError:
            raise client.fail(f"no agent {node} is running", client.EXIT_REFUSED) from None
        except nats.errors.TimeoutError:
            raise client.fail(f"agent {node} did not answer", client.EXIT_UNREACHABLE) from None
        try:
            return msgspec.json.decode(msg.data, type=InjectReply)
        except msgspec.DecodeError as err:
            raise client.fail(f"agent {node} sent a reply that does not decode: {err}",
                              client.EXIT_REFUSED) from None

    reply = client.run(str(ctx.obj["server"]), send)
    if not reply.ok:
        raise client.fail(safe(reply.error), client.EXIT_REFUSED)
    echo(f"Ok: {reply.result}")


health_app = typer.Typer(help="GPU health policies.", no_args_is_help=True)
app.add_typer(health_app, name="health")


@health_app.command("check-policy")
def check_policy(file: Annotated[Path, typer.Argument(help="A CEL policy YAML file.")]) -> None:
    """Compile every rule of a health policy; a bad rule is named with its CEL error."""
    from herdbook.health_policy import Policy, PolicyError
    readable_file(file, "FILE")
    try:
        policy = Policy.load(file)
    except PolicyError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    console.print(f"Ok: {len(policy.rules)} rules", markup=False)


@app.command()
def status(
    ctx: typer.Context,
    output: Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml, csv.")] = Format.table,
) -> None:
    """The control plane answering: node count, projector position and lag, dead letters,
    dropped heartbeat replays, liveness detections."""
    render_object(client.call(str(ctx.obj["server"]), "status", {}), output)


@app.command()
def version() -> None:
    """Print herdbook's version."""
    import herdbook
    console.print(herdbook.__version__)


def main() -> None:
    app()
