"""`herd agent`: run the compute-node agent (it imports ``herdbook.agent`` inside the
command only: that command is the agent's process), and `herd agent inject`."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.creds import (
    CredsOption,
    PasswordOption,
    TlsCa,
    TlsCert,
    TlsKey,
    UserOption,
    checked_auth,
)
from herdbook.cli.duration_flags import duration_option
from herdbook.cli.node_args import parse_labels
from herdbook.cli.output import echo, safe
from herdbook.cli.usage import log_level_option, plain_files, setup_logging, usable_dir, writable_file
from herdbook.events.faults import FAULTS
from herdbook.events.states import NodeClass

agent_app = typer.Typer(help="Run the compute-node agent (`herd agent --node-id ...`), or "
                        "inject faults into one (`herd agent inject ...`).")


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
    node_class: Annotated[str, typer.Option("--class", help=", ".join(NodeClass) + ".")
                          ] = NodeClass.STANDARD,
    heartbeat_interval: Annotated[float | None, duration_option(
        "--heartbeat-interval", help="Between heartbeats (default: a third of the control "
        "plane's heartbeat timeout for this node's class; 10s until it is known).",
        minimum=0.05)] = None,
    info_interval: Annotated[float, duration_option(
        "--info-interval", help="Between node-info checks.", default="1m",
        minimum=0.05)] = 60.0,
    resource_interval: Annotated[float, duration_option(
        "--resource-interval", help="Between resource updates.", default="30s",
        minimum=0.05)] = 30.0,
    fake_gpus: Annotated[int | None, typer.Option("--fake-gpus", min=0, help="Simulate N GPUs "
                                                  "instead of reading NVML.")] = None,
    instance_id: Annotated[str | None, typer.Option("--instance-id", envvar="HERD_INSTANCE_ID",
                                                    help="Provider instance this node runs on.")] = None,
    boot_retry_interval: Annotated[float, duration_option(
        "--boot-retry-interval", help="Between boot check attempts.", default="10s")] = 10.0,
    fake_allocs: Annotated[int, typer.Option("--fake-allocs", min=0, hidden=True,
                                             help="Running allocations to report.")] = 0,
    health_interval: Annotated[float, duration_option(
        "--health-interval", help="Between health checks.", default="1m",
        minimum=0.05)] = 60.0,
    fingerprint_interval: Annotated[float, duration_option(
        "--fingerprint-interval", help="Recompute the conformance fingerprint this often; "
        "also on request.", default="6h", positive=True)] = 6 * 3600.0,
    telemetry_interval: Annotated[float | None, duration_option(
        "--telemetry-interval", help="Between per-GPU telemetry samples (temperature, power, "
        "clocks, ECC, PCIe, NVLink, ... on herd.gpu.<node-id>; docs/gpus.md); off: none.",
        default="15s", minimum=0.05, off=True)] = 15.0,
    wipe_config: Annotated[str | None, typer.Option(
        "--wipe-config", help="YAML with the wipe steps of a sensitive node: steps: "
        "[{name, command, timeout}] (default: GPU memory clear, NVMe secure erase, RAM scrub, "
        "reboot into a clean image; fakes with --fake-gpus).")] = None,
    kmsg_source: Annotated[str | None, typer.Option(
        "--kmsg-source", help="Where XIDs of the kernel log come from: /dev/kmsg, file:PATH "
        "(a file or FIFO), journalctl or off [default: /dev/kmsg; off with --fake-gpus].")] = None,
    ib_sysfs: Annotated[str, typer.Option(
        "--ib-sysfs", help="Where InfiniBand ports are read (state, link_downed) for the "
        "port-down and flapping checks; off, or a path that does not exist: no such check.")
    ] = "/sys/class/infiniband",
    expected_gpus: Annotated[int | None, typer.Option(
        "--expected-gpus", min=0, help="GPUs this node must have; fewer is a gpu_count fault "
        "[default: the count it registered with].")] = None,
    throttle_window: Annotated[float, duration_option(
        "--throttle-window", help="How long HW slowdown, HW thermal or power brake "
        "throttling must last to be a fault.", default="5m", minimum=0.05)] = 300.0,
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
    if server:
        ctx.obj["server"] = server
    elif creds and ctx.obj["server_default"]:
        ctx.obj["server"] = checked_auth(auth, None) or ctx.obj["server"]
    ctx.obj["server"] = client.Server(ctx.obj["server"], auth)     # the agent's own
    checked_auth(auth, ctx.obj["server"])
    if ctx.invoked_subcommand is not None:
        return
    client.check_server(str(ctx.obj["server"]))
    import asyncio

    from herdbook.agent.agent_options import default_node_id
    from herdbook.agent.main import AgentOptions, run_agent

    try:
        cls = NodeClass(node_class)
    except ValueError:
        raise client.fail(f"invalid class {node_class!r}; choose from "
                          f"{', '.join(NodeClass)}", client.EXIT_USAGE) from None
    nid = client.check_id(node_id or default_node_id())
    if instance_id is not None:
        client.check_id(instance_id, "instance id")
    from herdbook.agent.wipe import WipeConfigError, load_steps
    try:
        load_steps(wipe_config, fake_gpus is not None)
    except (ValueError, WipeConfigError) as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    from herdbook.agent.kmsg import KMSG, check_source
    try:
        kmsg = check_source(kmsg_source or ("off" if fake_gpus is not None else KMSG))
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    from herdbook.agent.state import BOOTS_FILE, SENTINEL, SEQ_FILE
    from herdbook.agent.workload_state import STATE_FILE
    usable_dir(state_dir, "--state-dir")
    plain_files(state_dir, (SEQ_FILE, SENTINEL, BOOTS_FILE) + (() if state_file else (STATE_FILE,)),
                "--state-dir")
    if state_file:
        writable_file(state_file, "--state-file")
    options = AgentOptions(
        server=str(ctx.obj["server"]), node_id=nid, state_dir=state_dir,
        labels=parse_labels(labels), node_class=cls, heartbeat_interval=heartbeat_interval,
        info_interval=info_interval, resource_interval=resource_interval, fake_gpus=fake_gpus,
        instance_id=instance_id, boot_retry_interval=boot_retry_interval,
        fake_allocs=fake_allocs, health_interval=health_interval, state_file=state_file,
        fingerprint_interval=fingerprint_interval, wipe_config=wipe_config, auth=auth,
        kmsg_source=kmsg, telemetry_interval=telemetry_interval,
        ib_sysfs="off" if fake_gpus is not None and ib_sysfs == "/sys/class/infiniband"
        else ib_sysfs, expected_gpus=expected_gpus, throttle_window=throttle_window)
    setup_logging(log_level)
    from herdbook.agent.fence import NodeHeld, NodeTakenOver
    from herdbook.credentials import CredentialsError
    try:
        asyncio.run(run_agent(options))
    except KeyboardInterrupt:
        pass
    except (NodeHeld, NodeTakenOver) as err:
        # One node id, one live agent: the newcomer (or the one replaced) says why.
        raise client.fail(safe(str(err)), client.EXIT_REFUSED) from None
    except CredentialsError as err:   # another node's creds (agent.connection)
        raise client.fail(safe(str(err)), client.EXIT_USAGE) from None


@agent_app.command("inject")
def inject(
    ctx: typer.Context,
    fault: Annotated[str, typer.Argument(help=", ".join(FAULTS) + " (ecc-dbe, the "
                                         "spelling before, is read too).")],
    value: Annotated[float | None, typer.Argument(help="XID code, temperature °C, error "
                                                  "count, NVLink link, throttle bits (8, 64, "
                                                  "128) or GPUs missing.")] = None,
    node: Annotated[str, typer.Option("--node", help="The agent's node id.")] = "",
    gpu: Annotated[int, typer.Option("--gpu", min=0, help="GPU index.")] = 0,
) -> None:
    """Inject a GPU fault into a running agent that uses fake GPUs, e.g.
    `herd agent inject --node gpu-1 xid 79 --gpu 3`; the agent reports it at once."""
    import msgspec

    from herdbook.events.agent_requests import InjectReply, InjectRequest
    from herdbook.events.faults import Fault, fault_named
    from herdbook.events.subjects import inject_subject
    if not node:
        raise client.fail("--node is required", client.EXIT_USAGE)
    client.check_id(node)
    try:
        named = fault_named(fault)
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if named is Fault.XID and value is None:
        raise client.fail("xid needs a code, e.g. `xid 79`", client.EXIT_USAGE)

    request = InjectRequest(fault=named, gpu=gpu, value=value)

    async def send(nc: object) -> InjectReply:
        import nats.errors
        try:
            msg = await client.guarded_request(nc, inject_subject(node),
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



@agent_app.command("sample")
def sample(
    fake_gpus: Annotated[int | None, typer.Option(
        "--fake-gpus", min=0, help="Sample N fake GPUs (the agent's --fake-gpus backend) "
        "instead of this node's NVML.")] = None,
    node_id: Annotated[str | None, typer.Option(
        "--node-id", help="The node id it names (and seeds the fake GPUs) [default: "
        "hostname].")] = None,
) -> None:
    """Print one telemetry sample of every GPU of this node as JSON, exactly what
    `herd agent` publishes on herd.gpu.<node-id> (docs/gpus.md): a check of what NVML
    answers here, field by field; a field NVML lacks on a GPU is absent. Needs no NATS."""
    import sys
    import time

    import msgspec

    from herdbook.agent import fake_nvml, gpu, telemetry_sampler
    from herdbook.agent.agent_options import default_node_id
    nid = client.check_id(node_id or default_node_id())
    nvml = fake_nvml.FakeNvml(count=fake_gpus, seed=nid) if fake_gpus is not None else gpu.real_nvml()
    if nvml is None:
        raise client.fail("no NVML here: pynvml is not installed or no NVIDIA driver answers "
                          "(use --fake-gpus N to see the fake backend's sample)",
                          client.EXIT_REFUSED)
    # "sample": not an agent boot; the agent's samples carry its boot id.
    reading = telemetry_sampler.sample(nvml, nid, "sample", time.time())
    if not reading.gpus:
        raise client.fail("NVML answered but counted no GPU", client.EXIT_REFUSED)
    text = msgspec.json.format(msgspec.json.encode(reading), indent=2).decode()
    # NVML's strings (model, serial) are escaped like every other untrusted text.
    sys.stdout.write("".join(safe(line) + "\n" for line in text.splitlines()))
