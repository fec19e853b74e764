"""The NATS users of an auth-enabled embedded nats-server (`herd up --auth`), and what
each may publish and subscribe.

``<data-dir>/nats/users.json`` (mode 0600) is the registry; ``users.conf`` (0600, the
``authorization`` block that ``nats-server.conf`` includes) is rendered from it after
every change, and a running server re-reads it on SIGHUP, which is what
``nats-server --signal reload=<pid>`` sends. Changes hold an exclusive lock on
``users.lock``, so two `herd creds` at once do not lose a user.

Three kinds of user:
- ``control``: the control plane itself (``herd-control``), allowed everything.
- ``agent``: one compute node; publishes only its own subjects and the event names an
  agent writes, both generated from ``events.authority.FAMILIES`` (DESIGN §9), so it can
  neither heartbeat for another node nor approve itself; it has no JetStream consumer.
- ``operator``: a person or a tool; the API under its own name, fault injection and read
  access to the streams, no raw publish to any ``herd.<aggregate>.>`` subject.

herd clients name their reply inboxes ``_INBOX.<user>.`` (``herdbook.credentials``), so
an agent subscribes to its own replies only; an operator may subscribe to ``_INBOX.>``,
so the ``nats`` CLI and other clients work with operator credentials unchanged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from herdbook.events.authority import (
    API_READS,
    agent_publish_subjects,
    operator_agent_requests,
)
from herdbook.events.liveness_settings import LIVENESS_READ
from herdbook.events.subjects import (
    EVENTS_STREAM,
    HEARTBEATS_STREAM,
    aggregate_filter,
    heartbeat_subject,
    holder_subject,
    sync_subject,
    validate_id,
)
from herdbook.reactors.scheduler import CONSUMER as SCHEDULER_CONSUMER

CONTROL_USER = "herd-control"
USERS_JSON = "users.json"
USERS_CONF = "users.conf"
PID_FILE = "nats-server.pid"

class UsersError(RuntimeError):
    """The registry cannot be read or changed; one line for the operator."""


class User(msgspec.Struct, frozen=True, kw_only=True):
    user: str
    password: str
    kind: str
    """control, agent or operator."""
    node_id: str | None = None
    created_at: float = 0.0
    read_only: bool = False
    """An operator that may call the API's read routes only (`herd creds operator --reader`)."""


def agent_user(node_id: str) -> str:
    return f"agent-{validate_id(node_id)}"


def operator_user(name: str) -> str:
    return f"op-{validate_id(name, 'operator name')}"


PROTECTED_CONSUMERS = (SCHEDULER_CONSUMER,)
"""The control plane's durable consumers. Its other consumers are ephemeral, with names
the server draws at random, and no credential but the control plane's may list them."""


def _consumer_denials() -> list[str]:
    """Every JetStream API subject that creates, updates, reads from or deletes a protected
    consumer, plus the two create forms that take the name from the request body
    (``CONSUMER.CREATE.<stream>`` and ``CONSUMER.DURABLE.CREATE``): a body is a claim."""
    out = [f"$JS.API.CONSUMER.CREATE.{stream}" for stream in ("*",)]
    out.append("$JS.API.CONSUMER.DURABLE.CREATE.>")
    for name in PROTECTED_CONSUMERS:
        out += [f"$JS.API.CONSUMER.CREATE.*.{name}", f"$JS.API.CONSUMER.CREATE.*.{name}.>",
                f"$JS.API.CONSUMER.MSG.NEXT.*.{name}", f"$JS.API.CONSUMER.DELETE.*.{name}",
                f"$JS.API.CONSUMER.PAUSE.*.{name}", f"$JS.API.CONSUMER.UNPIN.*.{name}",
                f"$JS.API.CONSUMER.LEADER.STEPDOWN.*.{name}"]
    return out


SNAPSHOTS_STREAM = "OBJ_HERD_VIEW_SNAPSHOTS"
"""The view snapshots' object store (``control/snapshots.py``): the control plane's only."""
TOKENS_BUCKET = "herd_http_tokens"
"""The HTTP API's bearer tokens (``natsd/http_tokens.py``), shared by every replica."""
TOKENS_STREAM = f"KV_{TOKENS_BUCKET}"


def _snapshot_denials() -> list[str]:
    """Every read-only JetStream API subject an operator has, aimed at the snapshots'
    stream: neither its info, nor its messages, nor a consumer on it."""
    # The HTTP tokens' bucket too: only hashes, but nobody's business but the control plane's.
    out: list[str] = []
    for stream in (SNAPSHOTS_STREAM, TOKENS_STREAM):
        out += [f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.STREAM.MSG.GET.{stream}",
                f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
                f"$JS.API.CONSUMER.CREATE.{stream}.>", f"$JS.API.CONSUMER.INFO.{stream}.*",
                f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*", f"$JS.API.CONSUMER.DELETE.{stream}.*"]
    return out


def agent_permissions(node_id: str) -> dict[str, Any]:
    """Publish: exactly the stream subjects ``events.authority`` lets this node's agent
    write (its heartbeat, resources, health, and the node and allocation events an agent
    writes, on its own subjects only); the last event of its own node (to chain the next
    one), with the subject in the API subject so it cannot ask for another's; its own last
    heartbeat and the holder request of its own node id (``agent/fence.py``: is another
    agent running for it?); and its catch-up request (``herd.sync.<self>.allocs``,
    answered by the control plane with its own allocation events); the control plane's
    liveness settings (``events.liveness``).
    No JetStream consumer at all, so no consumer of anyone else.
    Subscribe: requests addressed to it, its own node's and allocations' events, its own
    inbox. Replies to requests it received (``allow_responses``) need no publish right."""
    nid = validate_id(node_id)
    user = agent_user(nid)
    publish = [
        *agent_publish_subjects(nid),
        f"$JS.API.DIRECT.GET.{EVENTS_STREAM}.{aggregate_filter('node', nid)}",
        f"$JS.API.DIRECT.GET.{HEARTBEATS_STREAM}.{heartbeat_subject(nid)}",
        # the same, stored under its liveness shard (``events.hb_shards``)
        f"$JS.API.DIRECT.GET.{HEARTBEATS_STREAM}.herd.hb.*.{nid}",
        holder_subject(nid),
        sync_subject(nid),
        LIVENESS_READ,
    ]
    subscribe = [f"herd.agent.{nid}.>", aggregate_filter("node", nid),
                 aggregate_filter("alloc", nid), f"_INBOX.{user}.>"]
    return {"publish": {"allow": publish}, "subscribe": {"allow": subscribe},
            "allow_responses": True}


def read_routes() -> list[str]:
    """The API's read routes, the same set a read-only HTTP token may call."""
    return sorted(API_READS)


def operator_permissions(name: str, read_only: bool = False) -> dict[str, Any]:
    """Publish: the API under its own name only (``herd.api.v1.<route>.<user>``: the
    control plane records the user as the actor, whatever the body says), requests to
    agents (fault injection, fingerprint), and the read-only JetStream API (stream info,
    message get, consumers it names in the API subject, their pulls and deletes) except
    anything touching a protected consumer. Subscribe: the streams' subjects and inboxes,
    but neither ``herd.api.>`` nor ``herd.agent.>``, so an operator cannot answer in the
    API's or an agent's name. ``read_only`` (a reader): the API's read routes only, by
    name, and no request to an agent."""
    api = ([f"herd.api.v1.{route}.{name}" for route in read_routes()] if read_only else
           [f"herd.api.v1.*.{name}", f"herd.api.v1.*.*.{name}",
            *operator_agent_requests()])
    publish = [
        *api,
        "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST",
        "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>",
        "$JS.API.CONSUMER.CREATE.*.*", "$JS.API.CONSUMER.CREATE.*.*.>",
        "$JS.API.CONSUMER.INFO.*.*", "$JS.API.CONSUMER.MSG.NEXT.*.*",
        "$JS.API.CONSUMER.DELETE.*.*",
    ]
    subscribe = [
        "_INBOX.>", "herd.node.>", "herd.instance.>", "herd.job.>", "herd.eval.>",
        "herd.alloc.>", "herd.pool.>", "herd.breaker.>", "herd.hb.>", "herd.health.>",
        "herd.res.>", "herd.gpu.>", "herd.deadletter.>",
    ]
    return {"publish": {"allow": publish, "deny": _consumer_denials() + _snapshot_denials()},
            "subscribe": {"allow": subscribe}, "allow_responses": True}


def permissions(user: User) -> dict[str, Any] | None:
    if user.kind == "agent":
        assert user.node_id is not None
        return agent_permissions(user.node_id)
    if user.kind == "operator":
        return operator_permissions(user.user, user.read_only)
    return None


def render(users: list[User]) -> str:
    """The ``authorization`` block for nats-server (its config syntax accepts JSON)."""
    entries = []
    for user in users:
        entry: dict[str, Any] = {"user": user.user, "password": user.password}
        perms = permissions(user)
        if perms is not None:
            entry["permissions"] = perms
        entries.append(entry)
    body = ",\n".join("    " + json.dumps(entry) for entry in entries)
    return ("# Generated by herd from users.json: edit with `herd creds`, not by hand.\n"
            f"authorization {{\n  users = [\n{body}\n  ]\n}}\n")


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only, replacing ``path`` atomically."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def new_password() -> str:
    """192 random bits, URL- and config-safe (A-Z a-z 0-9 _ -)."""
    return secrets.token_urlsafe(24)


class UserRegistry:
    """The users of one embedded server, kept in ``store_dir`` (``<data-dir>/nats``)."""

    def __init__(self, store_dir: str | Path) -> None:
        self.dir = Path(store_dir)

    @property
    def conf_path(self) -> Path:
        return self.dir / USERS_CONF

    def users(self) -> list[User]:
        path = self.dir / USERS_JSON
        try:
            return msgspec.json.decode(path.read_bytes(), type=list[User])
        except FileNotFoundError:
            return []
        except OSError as err:
            raise UsersError(f"{path}: {err.strerror}") from err
        except msgspec.DecodeError as err:
            raise UsersError(f"{path}: not a users file ({err})") from err

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[User]]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "users.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            users = self.users()
            yield users
            _write_private(self.dir / USERS_JSON,
                           msgspec.json.format(msgspec.json.encode(users)).decode() + "\n")
            _write_private(self.conf_path, render(users))

    def _put(self, user: User) -> User:
        with self._locked() as users:
            users[:] = [u for u in users if u.user != user.user] + [user]
        return user

    def ensure_control(self) -> User:
        """The control plane's own user, created at the first start and kept after;
        users.conf is written again either way (so it exists before the server starts)."""
        with self._locked() as users:
            for user in users:
                if user.user == CONTROL_USER:
                    return user
            control = User(user=CONTROL_USER, password=new_password(), kind="control",
                           created_at=time.time())
            users.append(control)
            return control

    def add_agent(self, node_id: str) -> User:
        """Issue (or re-issue, with a new password) the credentials of one node."""
        return self._put(User(user=agent_user(node_id), password=new_password(), kind="agent",
                              node_id=node_id, created_at=time.time()))

    def add_operator(self, name: str, read_only: bool = False) -> User:
        return self._put(User(user=operator_user(name), password=new_password(),
                              kind="operator", created_at=time.time(), read_only=read_only))

    def revoke(self, name: str) -> bool:
        if name == CONTROL_USER:
            raise UsersError(f"{CONTROL_USER} is the control plane's own user")
        with self._locked() as users:
            kept = [u for u in users if u.user != name]
            found = len(kept) != len(users)
            users[:] = kept
        return found

    def reload_server(self) -> bool:
        """Have the running nats-server re-read users.conf (SIGHUP); False if none runs.
        Connections of removed users are closed by the server."""
        try:
            pid = int((self.dir / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return False
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            cmdline = None
        # A stale pid file may name another process by now: signal nats-server only.
        if cmdline is not None and b"nats-server" not in cmdline:
            return False
        try:
            os.kill(pid, signal.SIGHUP)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def server_address(store_dir: str | Path) -> tuple[str, int] | None:
    """(host, port) the embedded server of ``store_dir`` was last started on."""
    try:
        text = (Path(store_dir) / "nats-server.conf").read_text()
    except OSError:
        return None
    match = re.search(r'^listen:\s*"?([^"\s]+):(\d+)"?\s*$', text, re.MULTILINE)
    return (match.group(1), int(match.group(2))) if match else None


def auth_enabled(store_dir: str | Path) -> bool:
    """Whether the embedded server of ``store_dir`` was last started with users."""
    try:
        text = (Path(store_dir) / "nats-server.conf").read_text()
    except OSError:
        return False
    return f'include "{USERS_CONF}"' in text


def running_server(store: Path) -> int | None:
    """The pid of the nats-server of ``store`` while it runs (its pid file names a live
    nats-server process, whoever owns it), else None."""
    try:
        pid = int((store / PID_FILE).read_text().strip())
        os.kill(pid, 0)
    except PermissionError:
        pass                # alive, another user's
    except (OSError, ValueError):
        return None
    try:
        if b"nats-server" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None     # a stale pid file naming another process by now
    except OSError:
        pass
    return pid
