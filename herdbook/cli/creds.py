"""`herd creds ...`: NATS users of an auth-enabled embedded server (`herd up --auth`).

These commands run where `herd up` runs: they change ``<data-dir>/nats/users.json``
and have the running nats-server reload its users (SIGHUP). With ``--config-dir`` they
change the users of an external cluster instead (`herd nats config --auth`), whose
servers the operator reloads."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, Output, console, render_rows

if TYPE_CHECKING:
    from herdbook.credentials import NatsAuth
    from herdbook.natsd.users import User, UserRegistry

creds_app = typer.Typer(help="Issue and revoke NATS credentials for agents and operators "
                        "(with `herd up --auth`; run where `herd up` runs).",
                        no_args_is_help=True)

DataDir = Annotated[str | None, typer.Option(
    "--data-dir", help="herd up's data dir [default: the config's data_dir, ./.herd].")]
ConfigFile = Annotated[Path | None, typer.Option("--config", "-c", help="herd up's YAML config.")]
Host = Annotated[str | None, typer.Option(
    "--host", help="Host name clients use to reach the server, for the printed URL "
    "[default: the address the embedded server listens on].")]
OutFile = Annotated[Path | None, typer.Option(
    "--out", help="Where to write the creds file [default: ./<user>.creds].")]
ConfigDir = Annotated[Path | None, typer.Option(
    "--config-dir", help="An external cluster's configuration from `herd nats config "
    "--auth`: change its users.conf instead of the embedded server's.")]


def _store_dir(config: Path | None, data_dir: str | None,
               config_dir: Path | None = None) -> Path:
    from herdbook.config import ConfigError, load_config
    if config_dir is not None:
        from herdbook.natsd.cluster_config import CLUSTER_JSON
        if data_dir is not None or config is not None:
            raise client.fail("--config-dir names the cluster's users: leave --data-dir and "
                              "--config out", client.EXIT_USAGE)
        if not (config_dir / CLUSTER_JSON).is_file():
            raise client.fail(f"--config-dir {config_dir}: not written by `herd nats config "
                              "--auth` (no cluster.json)", client.EXIT_USAGE)
        return config_dir
    try:
        cfg = load_config(config)
    except ConfigError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    from herdbook.cli.usage import usable_dir
    where = "--data-dir" if data_dir else "data_dir"
    usable_dir(data_dir or cfg.data_dir, where)
    return usable_dir(Path(data_dir or cfg.data_dir) / "nats", where)


def _registry(store: Path) -> UserRegistry:
    from herdbook.natsd.users import UserRegistry
    return UserRegistry(store)


def _url(store: Path, host: str | None, user: User | None = None) -> str:
    from herdbook.natsd.cluster_config import read_cluster
    from herdbook.natsd.users import server_address
    auth = f"{user.user}:{user.password}@" if user is not None else ""
    cluster = read_cluster(store)
    if cluster is not None:     # an external cluster: every server, the client fails over
        return ",".join(u.replace("://", f"://{auth}", 1) for u in cluster.urls)
    address = server_address(store) or ("127.0.0.1", 4222)
    shown = host or (socket.gethostname() if address[0] in ("0.0.0.0", "::") else address[0])
    return f"nats://{auth}{shown}:{address[1]}"


def _current(store: Path, path: Path, user: str, host: str | None) -> bool:
    """Whether the creds file ``path`` holds ``user``'s password in the registry and the
    URL it would be issued with now (`herd creds agent --keep`: deploy/compose.yaml issues
    at every `docker compose up`, and a new password would lock out a running agent)."""
    from herdbook.credentials import CredentialsError, read_creds
    from herdbook.natsd.users import UsersError
    try:
        held = read_creds(path)
        known = {u.user: u.password for u in _registry(store).users()}
    except (CredentialsError, UsersError):
        return False
    return held.user == user and known.get(user) == held.password and \
        held.url == _url(store, host)


def _issue(store: Path, user: User, host: str | None, out: Path | None, what: str) -> None:
    from herdbook.credentials import CredsFile, write_creds
    from herdbook.natsd.users import auth_enabled, running_server
    path = out or Path(f"{user.user}.creds")
    try:
        write_creds(path, CredsFile(user=user.user, password=user.password,
                                    url=_url(store, host), kind=user.kind, node_id=user.node_id))
    except OSError as err:
        raise client.fail(f"{path}: {err.strerror}", client.EXIT_USAGE) from None
    console.print(f"Ok: {what} {user.user}; {_reloaded(store)}", markup=False)
    console.print(f"  URL:        {_url(store, host, user)}", markup=False)
    console.print(f"  creds file: {path} (mode 0600)", markup=False)
    if user.kind == "agent":
        console.print(f"  run:        herd agent --node-id {user.node_id} --creds {path}",
                      markup=False)
    else:
        console.print(f"  use:        herd --creds {path} node list", markup=False)
    if not _is_cluster(store) and not auth_enabled(store) and running_server(store) is None:
        client.err_console.print(f"Note: the nats-server of {store.parent} was not started "
                                 "with --auth; these credentials apply once it is.",
                                 markup=False)


def _is_cluster(store: Path) -> bool:
    from herdbook.natsd.cluster_config import CLUSTER_JSON
    return (store / CLUSTER_JSON).is_file()


def _reloaded(store: Path) -> str:
    from herdbook.natsd.users import auth_enabled, running_server
    if _is_cluster(store):
        return (f"now copy {store / 'users.conf'} to every server of the cluster and have "
                "each reload it: nats-server --signal reload (SIGHUP to its pid)")
    # Every embedded server writes its pid file; one without users has none to reload.
    pid = running_server(store)
    if pid is None:
        return "no nats-server runs here: it takes effect at the next `herd up --auth`"
    if not auth_enabled(store):
        return (f"the running nats-server (pid {pid}) was started without --auth: it takes "
                "effect at the next `herd up --auth`")
    if _registry(store).reload_server():
        return "the running nats-server reloaded its users"
    return (f"the running nats-server (pid {pid}) could not be told to reload: run "
            f"`kill -HUP {pid}` as its user")


@creds_app.command("agent")
def agent(
    node_id: Annotated[str, typer.Argument(help="The node the agent runs as.")],
    data_dir: DataDir = None, config: ConfigFile = None, host: Host = None,
    out: OutFile = None, config_dir: ConfigDir = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the creds file when it already "
                                       "holds this node's current credentials (for an init "
                                       "step that runs at every start).")] = False,
) -> None:
    """Credentials for one node's agent: it may publish only that node's heartbeat,
    resources, health, the node events an agent writes and its allocations' status.
    Issuing again replaces the password (not with --keep while the file is current)."""
    from herdbook.natsd.users import UsersError, agent_user
    client.check_id(node_id)
    store = _store_dir(config, data_dir, config_dir)
    path = out or Path(f"{agent_user(node_id)}.creds")
    if keep and _current(store, path, agent_user(node_id), host):
        console.print(f"Ok: kept {path}: the current credentials of node {node_id}",
                      markup=False)
        return
    try:
        user = _registry(store).add_agent(node_id)
    except (UsersError, OSError) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    _issue(store, user, host, path, f"agent credentials of node {node_id}:")


@creds_app.command("operator")
def operator(
    who: Annotated[str | None, typer.Argument(
        metavar="[NAME]", help="Who they are for (op-<name>), as --name.")] = None,
    name: Annotated[str, typer.Option("--name", help="Who they are for (op-<name>).")] =
    "admin",
    data_dir: DataDir = None, config: ConfigFile = None, host: Host = None,
    out: OutFile = None,
    http: Annotated[bool, typer.Option("--http", help="Instead: a bearer token for the HTTP "
                                       "API and the console, acting as op-<name>.")] = False,
    read_only: Annotated[bool, typer.Option("--read-only", help="With --http: a token for "
                                            "the read routes only.")] = False,
    reader: Annotated[bool, typer.Option("--reader", help="NATS credentials for the API's "
                                         "read routes only (no command, no fault "
                                         "injection).")] = False,
    config_dir: ConfigDir = None,
) -> None:
    """Credentials for a person or a tool: the API (every herd command), fault injection
    and read access to the streams; no raw publish of events. With --http, an HTTP bearer
    token with the same API rights (or only reads, with --read-only)."""
    from herdbook.natsd.users import UsersError
    if who is not None:
        if name not in ("admin", who):
            raise client.fail(f"two names: {who} and --name {name}", client.EXIT_USAGE)
        name = who
    client.check_id(name, "operator name")
    if read_only and not http:
        raise client.fail("--read-only is for --http tokens (--reader: NATS credentials "
                          "that only read)", client.EXIT_USAGE)
    if reader and http:
        raise client.fail("--reader is for NATS credentials (--http --read-only: a token "
                          "that only reads)", client.EXIT_USAGE)
    store = _store_dir(config, data_dir, config_dir)
    if http:
        _issue_token(store, name, read_only)
        return
    try:
        user = _registry(store).add_operator(name, read_only=reader)
    except (UsersError, OSError) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    _issue(store, user, host, out, "read-only operator credentials" if reader
           else "operator credentials")


def _issue_token(store: Path, name: str, read_only: bool) -> None:
    from herdbook.cli.creds_tokens import issue_token
    from herdbook.natsd.http_tokens import HttpTokens
    from herdbook.natsd.users import UsersError
    try:
        token, entry, where = issue_token(store, name, read_only)
    except (UsersError, OSError) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    rights = "read-only " if read_only else ""
    console.print(f"Ok: {rights}HTTP token of {entry.user} (shown once; only its hash is kept, "
                  f"{where}; revoke: herd creds revoke {entry.user})", markup=False)
    console.print(f"  token: {token}", markup=False)
    base, where = _http_base(HttpTokens(store).served_url())
    console.print(f"  use:   curl -H 'Authorization: Bearer {token}' "
                  f"{base}/v1/status   # {where}", markup=False)


def _http_base(served: str | None) -> tuple[str, str]:
    """The HTTP API's base URL for the example, and where its port comes from: the URL
    `herd up` last served on (``HttpTokens.record_url``; this host's loopback for a
    wildcard address), else the default port."""
    from urllib.parse import urlsplit
    if served:
        try:
            url = urlsplit(served)
            host, port = url.hostname, url.port
        except ValueError:
            host = port = None
        if host and port:
            host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            host = f"[{host}]" if ":" in host else host
            return f"{url.scheme}://{host}:{port}", "the port herd up last served HTTP on"
    return "http://127.0.0.1:8641", "the default port; herd up --http-port changes it"


@creds_app.command("list")
def list_users(data_dir: DataDir = None, config: ConfigFile = None,
               output: Output = Format.table, config_dir: ConfigDir = None) -> None:
    """The users of the embedded server (never their passwords)."""
    from datetime import UTC, datetime

    from herdbook.natsd.users import UsersError
    store = _store_dir(config, data_dir, config_dir)
    try:
        users = _registry(store).users()
    except UsersError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    from herdbook.cli.creds_tokens import list_tokens
    try:
        tokens = list_tokens(store)
    except UsersError as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    rows = [{"user": u.user, "kind": "operator (reader)" if u.read_only else u.kind,
             "node_id": u.node_id,
             "created_at": datetime.fromtimestamp(u.created_at, UTC).isoformat(
                 timespec="seconds") if u.created_at else None} for u in users]
    rows += [{"user": t.user, "kind": "http token (read-only)" if t.read_only else "http token",
              "node_id": None, "created_at": datetime.fromtimestamp(t.created_at, UTC).isoformat(
                  timespec="seconds") if t.created_at else None} for t in tokens]
    render_rows(rows, [("USER", "user"), ("KIND", "kind"), ("NODE", "node_id"),
                       ("CREATED", "created_at")], output)


@creds_app.command("revoke")
def revoke(
    user: Annotated[str, typer.Argument(help="The user, e.g. agent-gpu-1 or op-alice.")],
    data_dir: DataDir = None, config: ConfigFile = None, config_dir: ConfigDir = None,
) -> None:
    """Remove a user and its HTTP tokens; the server closes its connections when it
    reloads, the HTTP API refuses the tokens at once."""
    from herdbook.natsd.users import UsersError
    store = _store_dir(config, data_dir, config_dir)
    from herdbook.cli.creds_tokens import revoke_tokens
    try:
        found = _registry(store).revoke(user)
        tokens, when = revoke_tokens(store, user) if user.startswith("op-") else (0, "")
    except (UsersError, OSError) as err:
        raise client.fail(str(err), client.EXIT_REFUSED) from None
    if not found and not tokens:
        raise client.fail(f"no user {user}", client.EXIT_REFUSED)
    if not found:
        console.print(f"Ok: the {tokens} HTTP token(s) of {user} revoked ({when})",
                      markup=False)
        return
    also = f" and its {tokens} HTTP token(s) ({when})" if tokens else ""
    console.print(f"Ok: {user}{also} revoked; {_reloaded(store)}", markup=False)


# Connection options shared by the global options, `herd up` and `herd agent`.
CredsOption = Annotated[str | None, typer.Option(
    "--creds", envvar="HERD_CREDS", help="A creds file from `herd creds` (user, password, "
    "server URL).")]
UserOption = Annotated[str | None, typer.Option("--user", envvar="HERD_USER",
                                                help="NATS user.")]
PasswordOption = Annotated[str | None, typer.Option(
    "--password", envvar="HERD_PASSWORD", help="NATS password (prefer --creds or the env "
    "var: a command line is visible to other users).")]
TlsCa = Annotated[str | None, typer.Option(
    "--tls-ca", envvar="HERD_TLS_CA", help="CA file to verify the NATS server with.")]
TlsCert = Annotated[str | None, typer.Option(
    "--tls-cert", envvar="HERD_TLS_CERT", help="Client certificate file (TLS).")]
TlsKey = Annotated[str | None, typer.Option(
    "--tls-key", envvar="HERD_TLS_KEY", help="Client private key file (TLS).")]


def checked_auth(auth: NatsAuth, server: str | None) -> str | None:
    """Read the files ``auth`` names now, so a bad one is a usage error (exit 2) before
    anything starts; return the server, the creds file's when ``server`` is None."""
    from herdbook.credentials import CredentialsError
    try:
        resolved, _ = auth.resolve(server)
    except CredentialsError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    return resolved
