"""Credentials and TLS against a real nats-server: `herd up --auth` (in-process control
plane), credentials issued by the real `herd creds`, the real Agent and CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest
from nats.js.errors import NotFoundError

from herdbook.agent.main import Agent, AgentOptions
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.plane import ControlPlane
from herdbook.credentials import CredentialsError, NatsAuth, read_creds, tls_context
from herdbook.events.agent_requests import LogsRequest, logs_reply_decoder
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeApproved
from herdbook.events.store import EventStore
from herdbook.events.subjects import EVENTS_STREAM, HEARTBEATS_STREAM, logs_subject
from herdbook.natsd.embedded import find_binary
from tests.conftest import HERD, free_port, herd
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    """`herd up --auth` in-process, on a free port."""
    async with running_plane(f"nats: {{port: {free_port()}, auth: true}}\n"
                             f"data_dir: '{tmp_path / 'd'}'\nnode_id: cp-auth\n"
                             "lifecycle: {heartbeat_timeout: 5s}\n") as control:
        yield control


async def issue(tmp_path: Path, kind: str, *args: str) -> Path:
    """The real `herd creds agent|operator`, where `herd up` runs."""
    out = tmp_path / f"{kind}-{'-'.join(args) or 'admin'}.creds"
    result = await asyncio.to_thread(herd, "creds", kind, *args, "--data-dir",
                                     str(tmp_path / "d"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "reloaded its users" in result.stdout
    assert out.stat().st_mode & 0o777 == 0o600
    return out


async def connect_as(plane: ControlPlane, creds: Path, errors: list[str]) -> Any:
    _, options = NatsAuth(creds=str(creds)).resolve(plane.url)

    async def on_error(err: Exception) -> None:
        errors.append(str(err))

    return await nats.connect(plane.url, error_cb=on_error, allow_reconnect=False, **options)


def server_log(plane: ControlPlane) -> str:
    return (plane.data_dir / "nats" / "nats-server.log").read_text()


async def test_an_agent_with_its_own_credentials_registers_heartbeats_and_is_approved(
        plane: ControlPlane, tmp_path: Path) -> None:
    agent_creds = await issue(tmp_path, "agent", "gpu-1")
    operator_creds = await issue(tmp_path, "operator", "--name", "alice")
    agent = Agent(AgentOptions(server=plane.url, node_id="gpu-1", state_dir=str(tmp_path / "a"),
                               heartbeat_interval=0.2, fake_gpus=2,
                               auth=NatsAuth(creds=str(agent_creds))))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 15)

        async def ready() -> bool:
            view = plane.projector.nodes.get("gpu-1") if plane.projector else None
            return view is not None and str(view.state) == "READY"

        await eventually(ready, timeout=20)
        approved = await asyncio.to_thread(herd, "--creds", str(operator_creds), "node",
                                           "approve", "gpu-1")
        assert approved.returncode == 0, approved.stderr
        listed = await asyncio.to_thread(herd, "--creds", str(operator_creds), "node", "list",
                                         "-o", "json")
        assert listed.returncode == 0, listed.stderr
        node = next(n for n in json.loads(listed.stdout) if n["id"] == "gpu-1")
        assert (node["approval"], node["state"]) == ("APPROVED", "READY")
        assert node["last_heartbeat"] is not None
        # the operator reads the stream as well (`herd events tail`)
        tail = await asyncio.to_thread(herd, "--creds", str(operator_creds), "events", "tail")
        assert tail.returncode == 0 and "node.approved" in tail.stdout, tail.stderr
        # the rest of what an agent does: requests addressed to it, an allocation run
        # to completion, a restart that reads its node and allocation history again
        for args in (["agent", "inject", "--node", "gpu-1", "thermal", "95"],
                     ["node", "fingerprint", "gpu-1"]):
            done = await asyncio.to_thread(herd, "--creds", str(operator_creds), *args)
            assert done.returncode == 0 and done.stdout.startswith("Ok"), (args, done.stderr)
        job = tmp_path / "job.yaml"
        go = tmp_path / "go"   # the workload writes its second line once this exists
        job.write_text('id: short\ncount: 1\ncommand: ["sh", "-c", "echo one; while [ ! -e '
                       f"{go} ]; do sleep 0.05; done; echo two\"]\n"
                       "resources: {cpu: 0.01, memory_mb: 1, gpus: 1}\n")
        ran = await asyncio.to_thread(herd, "--creds", str(operator_creds), "job", "run",
                                      str(job))
        assert ran.returncode == 0, ran.stderr

        async def running() -> Any:
            return next((a for a in plane.projector.allocs.values()
                         if a.status == "running"), None) if plane.projector else None

        async def completed() -> bool:
            return any(a.status == "complete" for a in plane.projector.allocs.values()) \
                if plane.projector else False

        # `herd alloc logs -f` through the control plane, from the agent's own files,
        # until the workload ends (issue 31 item 2)
        alloc = await eventually(running, timeout=20)
        follow = await asyncio.create_subprocess_exec(
            *HERD, "--creds", str(operator_creds), "alloc", "logs", alloc.id[:10], "-f",
            "--tail", "1", "--interval", "0.1", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert follow.stdout is not None
        first = await asyncio.wait_for(follow.stdout.readline(), 20)
        go.touch()
        rest, errors = await asyncio.wait_for(follow.communicate(), 20)
        assert (follow.returncode, first + rest) == (0, b"one\ntwo\n"), errors
        await eventually(completed, timeout=20)
        await _another_nodes_agent_cannot_read_the_log(plane, tmp_path, alloc.id,
                                                       operator_creds)
    finally:
        await agent.stop()
        await task
    again = Agent(AgentOptions(server=plane.url, node_id="gpu-1", state_dir=str(tmp_path / "a"),
                               heartbeat_interval=0.2, fake_gpus=2,
                               auth=NatsAuth(creds=str(agent_creds))))
    task = asyncio.create_task(again.run())
    try:
        await asyncio.wait_for(again.registered.wait(), 15)
        await asyncio.sleep(1.0)
    finally:
        await again.stop()
        await task
    # the real agent's every publish and subscription was allowed (gpu-2's are the attack's)
    assert not [line for line in server_log(plane).splitlines()
                if "Violation" in line and "user:agent-gpu-2" not in line]


async def _another_nodes_agent_cannot_read_the_log(plane: ControlPlane, tmp_path: Path,
                                                   alloc_id: str, operator_creds: Path) -> None:
    """An attacker holding gpu-2's agent credentials asks gpu-1's agent for a workload's
    output, directly and through the API: the server refuses both publishes. An operator
    asking the same subject is answered, so the refusal is the permission, not the
    subject."""
    request = msgspec.json.encode(LogsRequest(alloc_id=alloc_id, tail=1))
    operator = await connect_as(plane, operator_creds, [])
    try:
        answer = logs_reply_decoder.decode(
            (await operator.request(logs_subject("gpu-1"), request, timeout=5)).data)
        assert answer.ok and (answer.data, answer.offset) == ("two\n", 4), answer
    finally:
        await operator.close()
    errors: list[str] = []
    attacker = await connect_as(plane, await issue(tmp_path, "agent", "gpu-2"), errors)
    try:
        for subject in (logs_subject("gpu-1"), "herd.api.v1.alloc.logs",
                        "herd.api.v1.alloc.logs.agent-gpu-2"):
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await attacker.request(subject, request, timeout=0.25)
    finally:
        await attacker.close()
    assert errors == [f'nats: permissions violation for publish to "{subject}"' for subject in (
        "herd.agent.gpu-1.logs", "herd.api.v1.alloc.logs", "herd.api.v1.alloc.logs.agent-gpu-2")]


async def test_agent_credentials_cannot_heartbeat_for_another_node_nor_approve_itself(
        plane: ControlPlane, tmp_path: Path) -> None:
    creds = await issue(tmp_path, "agent", "gpu-1")
    errors: list[str] = []
    nc = await connect_as(plane, creds, errors)
    try:
        own = Heartbeat(node_id="gpu-1", boot_id="b", seq=1, sent_at=0.0)
        forged = Heartbeat(node_id="other", boot_id="b", seq=1, sent_at=0.0)
        await nc.publish("herd.hb.gpu-1", encode(own))
        await nc.publish("herd.hb.other", encode(forged))
        await nc.flush()
        await eventually(lambda: _async(any('"herd.hb.other"' in e for e in errors)))
        # an approval of itself, through the event store as the control plane writes it
        store = EventStore(nc, timeout=1.0, attempts=1, direct=True)
        with pytest.raises(Exception):  # noqa: B017 - refused: no reply ever comes
            await store.append(NodeApproved(node_id="gpu-1", actor="agent:gpu-1"))
        await eventually(lambda: _async(any('"herd.node.gpu-1.approved"' in e for e in errors)))
        # neither can it answer in the API's name nor read other clients' replies
        for subject in ("herd.api.v1.node.list", "_INBOX.>", "herd.hb.>"):
            await nc.subscribe(subject)
        await nc.flush()
        await eventually(lambda: _async(sum("subscription" in e.lower() for e in errors) >= 3))
    finally:
        await nc.close()
    js = plane.nc.jetstream()  # type: ignore[union-attr]
    assert (await js.get_last_msg(HEARTBEATS_STREAM, "herd.hb.gpu-1")).data == encode(own)
    with pytest.raises(NotFoundError):
        await js.get_last_msg(HEARTBEATS_STREAM, "herd.hb.other")
    with pytest.raises(NotFoundError):
        await js.get_last_msg(EVENTS_STREAM, "herd.node.gpu-1.approved")
    log = server_log(plane)
    assert 'Publish Violation - Subject "herd.hb.other"' in log
    assert 'Publish Violation - Subject "herd.node.gpu-1.approved"' in log


async def test_an_operator_calls_the_api_but_cannot_publish_events(
        plane: ControlPlane, tmp_path: Path) -> None:
    creds = await issue(tmp_path, "operator")
    assert read_creds(creds).user == "op-admin"
    status = await asyncio.to_thread(herd, "--creds", str(creds), "status", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["nodes"] == 1
    errors: list[str] = []
    nc = await connect_as(plane, creds, errors)
    try:
        await nc.publish("herd.node.cp-auth.deleted", b"{}")
        await nc.publish("herd.hb.cp-auth", b"{}")
        await nc.flush()
        await eventually(lambda: _async(len(errors) >= 2))
    finally:
        await nc.close()
    assert all("permissions violation" in e.lower() for e in errors), errors


async def test_a_credential_that_may_not_call_an_endpoint_is_denied_at_once(
        plane: ControlPlane, tmp_path: Path) -> None:
    """NATS drops a publish the user may not make and tells only the error callback: the
    CLI says permission denied within a moment (exit 1), not an outage after 15 s."""
    from herdbook.natsd.users import agent_user
    creds = await issue(tmp_path, "agent", "gpu-1")
    subject = f"herd.api.v1.node.list.{agent_user('gpu-1')}"
    for args in (["node", "list"], ["node", "cordon", "-l", "rack=r1"]):
        started = time.monotonic()
        denied = await asyncio.to_thread(herd, "--creds", str(creds), *args)
        assert time.monotonic() - started < 5, args
        assert (denied.returncode, denied.stdout) == (1, ""), (args, denied.stderr)
        assert denied.stderr == f"Error: permission denied: {subject}\n"
    many = await asyncio.to_thread(herd, "--creds", str(creds), "node", "cordon", "a", "b")
    assert many.returncode == 1 and many.stdout == "", many.stdout
    assert many.stderr == ("Error: permission denied: "
                           f"herd.api.v1.node.cordon.{agent_user('gpu-1')}\n")
    # requests addressed to an agent, not the API, fail as fast
    for args, subject in ((["agent", "inject", "--node", "gpu-2", "xid", "79"],
                           "herd.agent.gpu-2.inject"),
                          (["node", "fingerprint", "gpu-2"], "herd.agent.gpu-2.fingerprint")):
        started = time.monotonic()
        denied = await asyncio.to_thread(herd, "--creds", str(creds), *args)
        assert time.monotonic() - started < 5, args
        assert (denied.returncode, denied.stderr) == (
            1, f"Error: permission denied: {subject}\n"), (args, denied.stderr)


async def test_without_credentials_the_cli_is_refused_in_one_line(plane: ControlPlane,
                                                                  tmp_path: Path) -> None:
    result = await asyncio.to_thread(herd, "node", "list", server=plane.url)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1 and "authorization violation" in result.stderr
    wrong = await asyncio.to_thread(herd, "--user", "op-admin", "--password", "nope", "status",
                                    server=plane.url)
    assert wrong.returncode == 3 and wrong.stderr.count("\n") == 1


async def test_a_revoked_user_is_disconnected(plane: ControlPlane, tmp_path: Path) -> None:
    creds = await issue(tmp_path, "operator", "--name", "bob")
    errors: list[str] = []
    nc = await connect_as(plane, creds, errors)
    revoked = await asyncio.to_thread(herd, "creds", "revoke", "op-bob", "--data-dir",
                                      str(tmp_path / "d"))
    assert revoked.returncode == 0, revoked.stderr
    await eventually(lambda: _async(nc.is_closed))
    refused = await asyncio.to_thread(herd, "--creds", str(creds), "status")
    assert refused.returncode == 3
    listed = await asyncio.to_thread(herd, "creds", "list", "--data-dir", str(tmp_path / "d"),
                                     "-o", "json")
    assert [u["user"] for u in json.loads(listed.stdout)] == ["herd-control"]


async def _async(value: object) -> object:
    return value


def test_bad_tls_files_are_one_line_usage_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    for args in (["--tls-ca", missing, "status"], ["--tls-ca", str(garbage), "status"],
                 ["--tls-cert", missing, "status"], ["--creds", missing, "status"],
                 ["agent", "--tls-ca", missing, "--node-id", "n1"],
                 ["up", "--nats-url", "nats://127.0.0.1:1", "--tls-ca", missing]):
        result = herd(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1, (args, result.stderr)
    with pytest.raises(CredentialsError, match="nope.pem"):
        tls_context(ca=missing)


# -- TLS ------------------------------------------------------------------------------


def _certificate(name: str, key: Any, issuer: Any, issuer_key: Any, *, ca: bool = False,
                 server: bool = False) -> Any:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer or subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A self-signed CA, a server certificate for 127.0.0.1 and a client certificate."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    d = tmp_path / "pki"
    d.mkdir()

    def write(name: str, key: Any, cert: Any) -> None:
        (d / f"{name}.key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        (d / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("herd test CA", ca_key, None, None, ca=True)
    write("ca", ca_key, ca)
    for name in ("server", "client"):
        key = ec.generate_private_key(ec.SECP256R1())
        write(name, key, _certificate(name, key, ca.subject, ca_key, server=name == "server"))
    return d


@pytest.fixture
def tls_server(pki: Path, tmp_path: Path) -> Any:
    """nats-server with JetStream that requires TLS and a client certificate."""
    port = free_port()
    store = tmp_path / "tls-nats"
    store.mkdir()
    conf = store / "nats.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{store}" }}\n'
                    f'tls {{\n  cert_file: "{pki / "server.pem"}"\n'
                    f'  key_file: "{pki / "server.key"}"\n  ca_file: "{pki / "ca.pem"}"\n'
                    "  verify: true\n}\n")
    with open(store / "log", "wb") as log:
        proc = subprocess.Popen([find_binary(), "-c", str(conf)], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        from tests.conftest import wait_until
        wait_until(lambda: b"Server is ready" in (store / "log").read_bytes(), timeout=15)
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_control_plane_agent_and_cli_over_tls(pki: Path, tls_server: str,
                                                    tmp_path: Path) -> None:
    ca, cert, key = (str(pki / f) for f in ("ca.pem", "client.pem", "client.key"))
    config = parse_config(f"nats: {{url: '{tls_server}', tls: {{ca: '{ca}', cert: '{cert}', "
                          f"key: '{key}'}}}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp-tls\n")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    agent = Agent(AgentOptions(server=tls_server, node_id="gpu-t", fake_gpus=1,
                               state_dir=str(tmp_path / "a"), heartbeat_interval=0.2,
                               auth=NatsAuth(tls_ca=ca, tls_cert=cert, tls_key=key)))
    task = asyncio.create_task(agent.run())
    try:
        await asyncio.wait_for(agent.registered.wait(), 15)
        tls = ["--tls-ca", ca, "--tls-cert", cert, "--tls-key", key]
        listed = await asyncio.to_thread(herd, *tls, "node", "list", "-o", "json",
                                         server=tls_server)
        assert listed.returncode == 0, listed.stderr
        assert {n["id"] for n in json.loads(listed.stdout)} == {"cp-tls", "gpu-t"}
        # without the CA the server's certificate is not trusted; without a client
        # certificate the server refuses: one line, exit 3
        for args in (tls[2:], tls[:2]):
            refused = await asyncio.to_thread(herd, *args, "status", server=tls_server)
            assert refused.returncode == 3, refused.stderr
            assert refused.stderr.count("\n") == 1, refused.stderr
    finally:
        await agent.stop()
        await task
        await plane.stop()


async def test_the_actor_is_who_authenticated_not_what_the_request_says(
        plane: ControlPlane, tmp_path: Path) -> None:
    creds = await issue(tmp_path, "operator", "--name", "alice")
    errors: list[str] = []
    nc = await connect_as(plane, creds, errors)
    body = json.dumps({"id": "cp-auth", "actor": "bob", "reason": "claims to be bob"}).encode()
    try:
        reply = json.loads((await nc.request("herd.api.v1.node.cordon.op-alice", body,
                                              timeout=10)).data)
        assert reply["ok"], reply
        # neither the plain subject (the claim would count) nor another operator's name
        for subject in ("herd.api.v1.node.uncordon", "herd.api.v1.node.uncordon.op-bob"):
            with pytest.raises(Exception):  # noqa: B017 - refused by NATS: no reply comes
                await nc.request(subject, body, timeout=1)
    finally:
        await nc.close()
    js = plane.nc.jetstream()  # type: ignore[union-attr]
    stored = await js.get_last_msg(EVENTS_STREAM, "herd.node.cp-auth.cordoned")
    assert json.loads(stored.data or b"{}")["actor"] == "op-alice"
    assert plane.projector is not None and plane.projector.nodes["cp-auth"].intent == "CORDONED"
    # the real CLI with the same credentials: recorded under the credential's name too
    result = await asyncio.to_thread(herd, "--creds", str(creds), "node", "uncordon", "cp-auth",
                                     "-m", "back")
    assert result.returncode == 0, result.stderr
    stored = await js.get_last_msg(EVENTS_STREAM, "herd.node.cp-auth.uncordoned")
    assert json.loads(stored.data or b"{}")["actor"] == "op-alice"
    audit = await asyncio.to_thread(herd, "--creds", str(creds), "audit", "list", "-o", "json")
    assert audit.returncode == 0, audit.stderr
    assert {"op-alice"} <= {entry.get("actor") for entry in json.loads(audit.stdout)}


async def test_agents_and_operators_cannot_touch_consumers_that_are_not_theirs(
        plane: ControlPlane, tmp_path: Path) -> None:
    """Today's attack rewrote the scheduler's durable consumer through a name in the
    request body. An agent has no consumer right at all, nor a read of another node's
    events; an operator may create only consumers named in the API subject, never the
    scheduler's."""
    from nats.js.api import ConsumerConfig

    control_js = plane.nc.jetstream()  # type: ignore[union-attr]
    scheduler_before = (await control_js.consumer_info(EVENTS_STREAM, "herd-scheduler")).config
    agent_errors: list[str] = []
    agent = await connect_as(plane, await issue(tmp_path, "agent", "gpu-1"), agent_errors)
    operator_errors: list[str] = []
    operator = await connect_as(plane, await issue(tmp_path, "operator"), operator_errors)
    try:
        ajs, ojs = agent.jetstream(timeout=1), operator.jetstream(timeout=1)
        hijack = ConsumerConfig(filter_subject="herd.node.>")
        for js in (ajs, ojs):
            for config in (ConsumerConfig(name="herd-scheduler", filter_subject="herd.node.>"),
                           ConsumerConfig(durable_name="herd-scheduler",
                                          filter_subject="herd.node.>")):
                with pytest.raises(Exception):  # noqa: B017 - refused by NATS: no reply
                    await js.add_consumer(EVENTS_STREAM, config)
            with pytest.raises(Exception):  # noqa: B017
                await js.delete_consumer(EVENTS_STREAM, "herd-scheduler")
        # the body-named (legacy) create form is closed to both
        for nc in (agent, operator):
            with pytest.raises(Exception):  # noqa: B017
                await nc.request(f"$JS.API.CONSUMER.CREATE.{EVENTS_STREAM}",
                                 json.dumps({"stream_name": EVENTS_STREAM,
                                             "config": {"name": "herd-scheduler"}}).encode(),
                                 timeout=1)
        # an agent creates no consumer at all and reads no other node's events
        with pytest.raises(Exception):  # noqa: B017
            await ajs.add_consumer(EVENTS_STREAM, hijack.evolve(name="mine"))
        for get in (ajs.get_last_msg(EVENTS_STREAM, "herd.node.cp-auth.>"),
                    ajs.get_last_msg(EVENTS_STREAM, "herd.node.cp-auth.>", direct=True)):
            with pytest.raises(Exception):  # noqa: B017
                await get
        # ...but its own node's last event it may read (to chain the next one)
        with pytest.raises(NotFoundError):
            await ajs.get_last_msg(EVENTS_STREAM, "herd.node.gpu-1.>", direct=True)
        # an operator's own, named consumer works
        info = await ojs.add_consumer(EVENTS_STREAM, hijack.evolve(name="op-tail"))
        assert info.name == "op-tail"
        await ojs.delete_consumer(EVENTS_STREAM, "op-tail")
    finally:
        await agent.close()
        await operator.close()
    after = (await control_js.consumer_info(EVENTS_STREAM, "herd-scheduler")).config
    assert (after.filter_subjects, after.filter_subject) == (
        scheduler_before.filter_subjects, scheduler_before.filter_subject)
    log = server_log(plane)
    assert "Publish Violation" in log and "herd-scheduler" in log
