"""Client credentials (pure) and the permissions of each kind of NATS user."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from herdbook.credentials import (
    CredentialsError,
    CredsFile,
    NatsAuth,
    read_creds,
    redact,
    write_creds,
)
from herdbook.natsd.users import (
    UserRegistry,
    UsersError,
    agent_permissions,
    operator_permissions,
)


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` one token, ``>`` the rest."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


def allowed(perms: dict[str, dict[str, list[str]]], kind: str, subject: str) -> bool:
    rules = perms[kind]
    return (any(matches(p, subject) for p in rules["allow"])
            and not any(matches(p, subject) for p in rules.get("deny", [])))


def test_an_agent_publishes_only_its_own_subjects_and_agent_events() -> None:
    perms = agent_permissions("gpu-1")
    agent_events = ("registered", "info_updated", "boot_started", "boot_checked", "wipe_step",
                    "wiped", "wipe_failed")
    for subject in ("herd.hb.gpu-1", "herd.res.gpu-1", "herd.health.gpu-1",
                    "herd.sync.gpu-1.allocs", "$JS.API.DIRECT.GET.HERD_EVENTS.herd.node.gpu-1.>",
                    "herd.agent.gpu-1.holder", "$JS.API.DIRECT.GET.HERD_HEARTBEATS.herd.hb.gpu-1",
                    *(f"herd.node.gpu-1.{e}" for e in agent_events),
                    *(f"herd.alloc.gpu-1.a1.{e}" for e in ("running", "completed", "failed",
                                                           "stopped", "lost"))):
        assert allowed(perms, "publish", subject), subject
    for subject in ("herd.hb.other", "herd.hb.gpu-1x", "herd.node.gpu-1.approved",
                    "herd.node.gpu-1.cordoned", "herd.node.other.registered",
                    "herd.alloc.other.a1.running", "herd.alloc.gpu-1.a1.placed",
                    "herd.api.v1.node.approve", "herd.job.j.registered",
                    "$JS.API.STREAM.DELETE.HERD_EVENTS", "$JS.API.STREAM.PURGE.HERD_EVENTS",
                    "$JS.API.CONSUMER.MSG.NEXT.HERD_EVENTS.herd-scheduler",
                    "$JS.API.CONSUMER.DELETE.HERD_EVENTS.herd-scheduler",
                    # no consumer at all, and no read of another node's events
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS",
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS.x.herd.alloc.gpu-1.>",
                    "$JS.API.CONSUMER.DURABLE.CREATE.HERD_EVENTS.herd-scheduler",
                    "$JS.API.STREAM.MSG.GET.HERD_EVENTS", "$JS.API.DIRECT.GET.HERD_EVENTS",
                    "$JS.API.DIRECT.GET.HERD_EVENTS.herd.node.other.>",
                    "herd.sync.other.allocs", "herd.alloc.gpu-1.a1.placed",
                    "herd.agent.other.holder", "herd.agent.gpu-1.inject",
                    "$JS.API.DIRECT.GET.HERD_HEARTBEATS.herd.hb.other",
                    "$JS.API.DIRECT.GET.HERD_HEARTBEATS",
                    "herd.alloc.gpu-1.a1.stop_requested", "herd.node.gpu-1.boot_checked.x"):
        assert not allowed(perms, "publish", subject), subject
    assert allowed(perms, "subscribe", "herd.agent.gpu-1.inject")
    assert allowed(perms, "subscribe", "herd.alloc.gpu-1.a1.placed")
    assert not allowed(perms, "subscribe", "herd.alloc.other.a1.placed")
    assert allowed(perms, "subscribe", "_INBOX.agent-gpu-1.abc.1")
    for subject in ("herd.agent.other.inject", "_INBOX.op-alice.x", "herd.api.v1.node.list",
                    "herd.hb.gpu-1", "herd.node.other.approved"):
        assert not allowed(perms, "subscribe", subject), subject


def test_an_operator_uses_the_api_and_reads_but_never_publishes_events() -> None:
    perms = operator_permissions("op-alice")
    for subject in ("herd.api.v1.node.approve.op-alice", "herd.api.v1.status.op-alice",
                    "herd.agent.gpu-1.inject", "$JS.API.STREAM.MSG.GET.HERD_EVENTS",
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS.herd-feed-1.herd.>",
                    "$JS.API.CONSUMER.MSG.NEXT.HERD_EVENTS.herd-feed-1"):
        assert allowed(perms, "publish", subject), subject
    for subject in ("herd.node.gpu-1.approved", "herd.hb.gpu-1", "herd.alloc.n.a.running",
                    # the API only under its own name: the actor is who authenticated
                    "herd.api.v1.node.approve", "herd.api.v1.node.approve.op-bob",
                    "$JS.API.STREAM.DELETE.HERD_EVENTS", "$JS.API.STREAM.PURGE.HERD_EVENTS",
                    "$JS.API.CONSUMER.DELETE.HERD_EVENTS.herd-scheduler",
                    # the control plane's consumer, by name in the subject or in the body
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS.herd-scheduler",
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS.herd-scheduler.herd.eval.>",
                    "$JS.API.CONSUMER.CREATE.HERD_EVENTS",
                    "$JS.API.CONSUMER.DURABLE.CREATE.HERD_EVENTS.herd-scheduler",
                    "$JS.API.CONSUMER.MSG.NEXT.HERD_EVENTS.herd-scheduler"):
        assert not allowed(perms, "publish", subject), subject
    assert allowed(perms, "subscribe", "herd.node.gpu-1.approved")
    for subject in ("herd.api.v1.node.approve", "herd.agent.gpu-1.inject"):
        assert not allowed(perms, "subscribe", subject), subject


def test_the_registry_keeps_users_private_and_renders_them(tmp_path: Path) -> None:
    registry = UserRegistry(tmp_path)
    control = registry.ensure_control()
    assert registry.ensure_control() == control       # created once, kept after
    first = registry.add_agent("gpu-1")
    second = registry.add_agent("gpu-1")              # re-issued: a new password
    assert first.password != second.password
    registry.add_operator("alice")
    assert [u.user for u in registry.users()] == ["herd-control", "agent-gpu-1", "op-alice"]
    for name in ("users.json", "users.conf"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    conf = (tmp_path / "users.conf").read_text()
    assert second.password in conf and first.password not in conf
    assert registry.revoke("op-alice") and not registry.revoke("op-alice")
    with pytest.raises(UsersError):
        registry.revoke("herd-control")
    assert not registry.reload_server()               # no server runs here


def test_resolve_takes_explicit_then_creds_file_then_url(tmp_path: Path) -> None:
    path = tmp_path / "a.creds"
    write_creds(path, CredsFile(user="agent-n1", password="pw", url="nats://h:4222"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_creds(path).user == "agent-n1"
    server, kwargs = NatsAuth(creds=str(path)).resolve(None)
    assert server == "nats://h:4222"
    assert kwargs == {"user": "agent-n1", "password": "pw", "inbox_prefix": "_INBOX.agent-n1"}
    server, kwargs = NatsAuth(user="u", password="p", creds=str(path)).resolve("nats://x:1")
    assert (server, kwargs["user"], kwargs["password"]) == ("nats://x:1", "u", "p")
    _, kwargs = NatsAuth().resolve("nats://op-bob:secret@x:1,nats://y:2")
    assert kwargs == {"inbox_prefix": "_INBOX.op-bob"}   # nats-py reads the URL's creds
    assert NatsAuth().resolve("nats://x:1") == ("nats://x:1", {})
    with pytest.raises(CredentialsError, match="--password"):
        NatsAuth(user="u").resolve("nats://x:1")
    with pytest.raises(CredentialsError, match="nope"):
        NatsAuth(creds=str(tmp_path / "nope")).resolve(None)


def test_redact_hides_passwords() -> None:
    assert redact("nats://u:secret@h:4222,nats://k:4223") == "nats://u:***@h:4222,nats://k:4223"
    assert redact("nats://h:4222") == "nats://h:4222"
