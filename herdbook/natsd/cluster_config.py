"""The configuration of an external nats-server cluster for herdbook (`herd nats config
--auth`): one ``<name>.conf`` per server, and the users every one of them includes.

The users are the embedded server's (``natsd.users``): the same registry file
(``users.json``), the same rendering (``users.conf``, every user's permissions from
``events.authority``'s subject table), changed by the same `herd creds` (``--config-dir``).
The servers' route connections authenticate with a user of their own (``routes.json``),
so a stranger cannot join the cluster by dialling a route port. ``cluster.json`` keeps
what the CLI needs later: the client URLs and the CA a client verifies the servers with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from herdbook.events.hb_shards import MAX_SHARDS, mapping_conf
from herdbook.natsd.users import USERS_CONF, UserRegistry, _write_private, new_password

CLUSTER_JSON = "cluster.json"
ROUTES_JSON = "routes.json"
ROUTE_USER = "herd-route"
CONTROL_CREDS = "herd-control.creds"


class ClusterConfigError(ValueError):
    """A route or option that cannot make a cluster; one line for the operator."""


class ClusterFile(msgspec.Struct, frozen=True, kw_only=True):
    """``cluster.json``: how clients reach the cluster this directory configures."""

    urls: list[str]
    tls_ca: str | None = None


@dataclass(frozen=True)
class Member:
    name: str
    host: str
    """Where its route listens, as the other servers dial it."""
    route_port: int
    client_port: int
    monitor_port: int


@dataclass(frozen=True)
class Layout:
    """Everything a server's file depends on, from the command line."""

    routes: list[str]
    listen_host: str = "0.0.0.0"
    port: int = 4222
    monitor_host: str = "127.0.0.1"
    monitor_port: int = 8222
    store_dir: str = "/var/lib/nats"
    cluster_name: str = "herd"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    max_payload: int = 1024 * 1024
    liveness_shards: int = 1
    """The control plane's ``lifecycle.liveness_shards``: the heartbeat mapping."""


def members(layout: Layout) -> list[Member]:
    """One server per route URL (``nats-route://HOST:PORT``), named n1..nN. Servers that
    share a host (a trial on one machine) count their client and monitoring ports up from
    ``port`` and ``monitor_port``, so they do not collide; on separate hosts every server
    uses the same ports."""
    if not layout.routes:
        raise ClusterConfigError("--cluster-routes: name one route URL per server")
    if len(layout.routes) % 2 == 0:
        raise ClusterConfigError(
            f"--cluster-routes: {len(layout.routes)} servers; JetStream needs a majority, "
            "so an even count tolerates no more losses than one server fewer: use 1, 3 or 5")
    out: list[Member] = []
    on_host: dict[str, int] = {}
    seen: set[tuple[str, int]] = set()
    for i, route in enumerate(layout.routes):
        try:
            parts = urlsplit(route.strip())
            host, port = parts.hostname, parts.port
        except ValueError:
            host = port = None
            parts = urlsplit("")
        if parts.scheme != "nats-route" or not host or not port:
            raise ClusterConfigError(f"--cluster-routes: {route!r} is not "
                                     "nats-route://HOST:PORT")
        if (host, port) in seen:
            raise ClusterConfigError(f"--cluster-routes: {host}:{port} named twice")
        seen.add((host, port))
        k = on_host.get(host, 0)
        on_host[host] = k + 1
        out.append(Member(f"n{i + 1}", host, port, layout.port + k, layout.monitor_port + k))
    return out


def _tls_block(layout: Layout, indent: str) -> list[str]:
    if not (layout.tls_cert or layout.tls_key or layout.tls_ca):
        return []
    lines = [f"{indent}tls {{"]
    for key, value in (("cert_file", layout.tls_cert), ("key_file", layout.tls_key),
                       ("ca_file", layout.tls_ca)):
        if value:
            lines.append(f"{indent}  {key}: {json.dumps(value)}")
    return [*lines, f"{indent}  timeout: 2", f"{indent}}}"]


def check_tls(layout: Layout) -> None:
    if not 1 <= layout.liveness_shards <= MAX_SHARDS:
        raise ClusterConfigError(f"--liveness-shards: 1 to {MAX_SHARDS}")
    if bool(layout.tls_cert) != bool(layout.tls_key):
        raise ClusterConfigError("--tls-cert and --tls-key go together")
    if layout.tls_ca and not layout.tls_cert:
        raise ClusterConfigError("--tls-ca needs --tls-cert and --tls-key: the servers "
                                 "present a certificate, clients verify it with the CA")


def render_server(layout: Layout, member: Member, everyone: list[Member],
                  route_password: str) -> str:
    """One server's nats-server configuration. JSON strings are valid in its syntax."""
    q = json.dumps
    auth = f"{ROUTE_USER}:{route_password}@"
    lines = [
        "# Generated by `herd nats config --auth`; users: `herd creds ... --config-dir`.",
        f"server_name: {q(member.name)}",
        f"listen: {q(f'{layout.listen_host}:{member.client_port}')}",
        f"http: {q(f'{layout.monitor_host}:{member.monitor_port}')}",
        f"max_payload: {layout.max_payload}",
        *_tls_block(layout, ""),
        "jetstream {",
        f"  store_dir: {q(str(Path(layout.store_dir) / member.name))}",
        "}",
        "cluster {",
        f"  name: {q(layout.cluster_name)}",
        f"  listen: {q(f'{layout.listen_host}:{member.route_port}')}",
        "  authorization {",
        f"    user: {q(ROUTE_USER)}",
        f"    password: {q(route_password)}",
        "    timeout: 2",
        "  }",
        *_tls_block(layout, "  "),
        "  routes: [",
        *[f"    {q(f'nats-route://{auth}{m.host}:{m.route_port}')}"
          for m in everyone if m is not member],
        "  ]",
        "}",
        # the same heartbeat mapping the embedded server has (``events.hb_shards``)
        *mapping_conf(layout.liveness_shards),
        f"include {q(USERS_CONF)}",
    ]
    return "\n".join(lines) + "\n"


def client_urls(layout: Layout, everyone: list[Member]) -> list[str]:
    scheme = "tls" if layout.tls_cert else "nats"
    return [f"{scheme}://{m.host}:{m.client_port}" for m in everyone]


def route_password(directory: Path) -> str:
    """The routes' password, drawn once and kept: servers configured by an earlier run
    still form one cluster with those of this one."""
    path = directory / ROUTES_JSON
    try:
        kept = json.loads(path.read_text()).get("password")
    except (OSError, ValueError, AttributeError):
        kept = None
    if isinstance(kept, str) and kept:
        return kept
    password = new_password()
    _write_private(path, json.dumps({"user": ROUTE_USER, "password": password}) + "\n")
    return password


def write_cluster(directory: Path, layout: Layout) -> tuple[list[Path], list[str]]:
    """Write every server's file, the users (the control plane's created on the first
    run, kept after) and ``cluster.json``; return the files and the client URLs."""
    check_tls(layout)
    everyone = members(layout)
    directory.mkdir(parents=True, exist_ok=True)
    registry = UserRegistry(directory)
    registry.ensure_control()          # writes users.json and users.conf
    password = route_password(directory)
    written = []
    for member in everyone:
        path = directory / f"{member.name}.conf"
        # 0600: it holds the routes' password
        _write_private(path, render_server(layout, member, everyone, password))
        written.append(path)
    urls = client_urls(layout, everyone)
    ca = str(Path(layout.tls_ca).resolve()) if layout.tls_ca else None
    (directory / CLUSTER_JSON).write_bytes(
        msgspec.json.format(msgspec.json.encode(ClusterFile(urls=urls, tls_ca=ca))) + b"\n")
    return written, urls


def read_cluster(directory: Path) -> ClusterFile | None:
    try:
        return msgspec.json.decode((directory / CLUSTER_JSON).read_bytes(), type=ClusterFile)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
