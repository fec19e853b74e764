"""An external 3-server cluster started from `herd nats config --auth`'s files, users from
`herd creds --config-dir`: agents and operators hold least privilege on it, and HTTP tokens
live in a KV bucket every control-plane replica reads."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest

from herdbook.agent.main import Agent, AgentOptions
from herdbook.control.plane import ControlPlane
from herdbook.credentials import NatsAuth
from herdbook.natsd.cluster import free_ports
from herdbook.natsd.embedded import launch, terminate, wait_listening
from herdbook.natsd.http_tokens import HttpTokens
from tests.conftest import free_port, herd
from tests.integration.conftest import running_plane
from tests.integration.test_agent_and_control import eventually


class Cluster:
    def __init__(self, out: Path, urls: list[str], procs: list[subprocess.Popen[bytes]]) -> None:
        self.out, self.urls, self.procs = out, urls, procs

    @property
    def url(self) -> str:
        return ",".join(self.urls)

    def creds(self, *args: str) -> Path:
        """The real `herd creds ... --config-dir`, then every server reloads its users (what
        `nats-server --signal reload` sends)."""
        path = self.out / f"{args[1]}.creds"
        result = herd("creds", *args, "--config-dir", str(self.out), "--out", str(path))
        assert result.returncode == 0, result.stderr
        self.reload()
        return path

    def reload(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    out = tmp_path_factory.mktemp("nats-config")
    ports = free_ports(9)
    routes = ",".join(f"nats-route://127.0.0.1:{p}" for p in ports[:3])
    # on one host the client and monitoring ports count up from --port / --monitor-port:
    # three free ports in a row are likely, and a clash fails loudly at the start below
    result = herd("nats", "config", "--auth", "--out", str(out), "--cluster-routes", routes,
                  "--host", "127.0.0.1", "--port", str(ports[3]), "--monitor-port",
                  str(ports[6]), "--store-dir", str(out / "js"))
    assert result.returncode == 0, result.stderr
    urls = json.loads((out / "cluster.json").read_text())["urls"]
    procs = [launch(out / f"n{i}.conf", out / f"n{i}.log") for i in (1, 2, 3)]
    try:
        for i, (proc, u) in enumerate(zip(procs, urls, strict=True)):
            wait_listening(proc, "127.0.0.1", int(u.rsplit(":", 1)[1]), out / f"n{i + 1}.log",
                           f"n{i + 1}", 15)
        monitor = f"http://127.0.0.1:{ports[6]}/jsz"
        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(monitor, timeout=1) as page:  # noqa: S310 - local
                if (json.loads(page.read()).get("meta_cluster") or {}).get("leader"):
                    break
            assert time.monotonic() < deadline, "no JetStream meta leader"
            time.sleep(0.1)
        yield Cluster(out, urls, procs)
    finally:
        for proc in procs:
            terminate(proc)


def plane_config(cluster: Cluster, tmp_path: Path, name: str) -> str:
    return (f"nats: {{url: '{cluster.url}', creds: '{cluster.out / 'herd-control.creds'}', "
            f"replicas: 3, auth: true}}\ndata_dir: '{tmp_path / name}'\nnode_id: {name}\n"
            f"http: {{port: {free_port()}}}\nlifecycle: {{heartbeat_timeout: 5s}}\n")


async def connect(cluster: Cluster, creds: Path, errors: list[str]) -> Any:
    _, options = NatsAuth(creds=str(creds)).resolve(None)

    async def on_error(err: Exception) -> None:
        errors.append(str(err))

    return await nats.connect(cluster.urls, error_cb=on_error, allow_reconnect=False,
                              **options)


async def test_agents_and_operators_hold_least_privilege_on_the_cluster(
        cluster: Cluster, tmp_path: Path) -> None:
    agent_creds = await asyncio.to_thread(cluster.creds, "agent", "gpu-1")
    alice = await asyncio.to_thread(cluster.creds, "operator", "alice")
    bob = await asyncio.to_thread(cluster.creds, "operator", "bob", "--reader")
    async with running_plane(plane_config(cluster, tmp_path, "cp-a")) as plane:
        agent = Agent(AgentOptions(server=cluster.url, node_id="gpu-1",
                                   state_dir=str(tmp_path / "agent"), heartbeat_interval=0.2,
                                   fake_gpus=1, auth=NatsAuth(creds=str(agent_creds))))
        task = asyncio.create_task(agent.run())
        try:
            await asyncio.wait_for(agent.registered.wait(), 20)
            await eventually(lambda: _async(plane.projector.nodes.get("gpu-1") is not None))

            errors: list[str] = []
            nc = await connect(cluster, agent_creds, errors)
            try:   # another node's heartbeat, an operator route: both refused by the server
                await nc.publish("herd.hb.gpu-2", b"{}")
                await nc.publish("herd.api.v1.node.approve", b'{"node_id": "gpu-1"}')
                await nc.flush()
                await eventually(lambda: _async(len(errors) >= 2))
            finally:
                await nc.close()
            assert all("permissions violation" in e.lower() for e in errors), errors
            assert "herd.hb.gpu-2" in errors[0] and "herd.api.v1.node.approve" in errors[1]

            as_agent = await asyncio.to_thread(herd, "--creds", str(agent_creds), "node",
                                               "approve", "gpu-1")
            as_reader = await asyncio.to_thread(herd, "--creds", str(bob), "node", "approve",
                                                "gpu-1")
            assert as_agent.returncode == 1 and as_reader.returncode == 1, (as_agent, as_reader)
            assert "permission" in as_reader.stderr.lower(), as_reader.stderr
            listed = await asyncio.to_thread(herd, "--creds", str(bob), "node", "list")
            assert listed.returncode == 0 and "gpu-1" in listed.stdout, listed.stderr
            approved = await asyncio.to_thread(herd, "--creds", str(alice), "node", "approve",
                                               "gpu-1")
            assert approved.returncode == 0, approved.stderr
            assert plane.projector.nodes["gpu-1"].approval_actor == "op-alice"
        finally:
            await agent.stop()
            await asyncio.wait_for(task, 10)


async def _async(value: bool) -> bool:
    return value


async def status(session: aiohttp.ClientSession, plane: ControlPlane, token: str) -> int:
    assert plane.web is not None
    async with session.get(f"{plane.web.url}v1/status",
                           headers={"Authorization": f"Bearer {token}"}) as response:
        return response.status


async def test_a_token_issued_through_one_replica_opens_the_other_and_revoked_neither(
        cluster: Cluster, tmp_path: Path) -> None:
    # a token from before the bucket, in replica A's data dir: A moves it there at start
    old, _ = HttpTokens(tmp_path / "cp-b" / "nats").issue("carol")
    async with running_plane(plane_config(cluster, tmp_path, "cp-b")) as a, \
            running_plane(plane_config(cluster, tmp_path, "cp-c")) as b, \
            aiohttp.ClientSession() as session:
        assert not (tmp_path / "cp-b" / "nats" / "http_tokens.json").exists()
        made = await asyncio.to_thread(herd, "creds", "operator", "dave", "--http",
                                       "--config-dir", str(cluster.out))
        assert made.returncode == 0, made.stderr
        found = re.search(r"token: (\S+)", made.stdout)
        assert found is not None, made.stdout
        new = found.group(1)
        for token in (old, new):
            for plane in (a, b):
                await eventually(lambda p=plane, t=token: _is(status(session, p, t), 200))
        for user in ("op-carol", "op-dave"):
            gone = await asyncio.to_thread(herd, "creds", "revoke", user, "--config-dir",
                                           str(cluster.out))
            assert gone.returncode == 0 and "HTTP token" in gone.stdout, gone.stderr
        for token in (old, new):
            for plane in (a, b):
                await eventually(lambda p=plane, t=token: _is(status(session, p, t), 401))


async def _is(value: Any, wanted: int) -> bool:
    return bool(await value == wanted)
