"""Where `herd creds` issues and revokes HTTP tokens: the KV bucket every control-plane
replica reads (``natsd/token_bucket.py``), reached with the control plane's own user
(the data dir's, or the cluster configuration's from `herd nats config --auth`). With
the embedded server not running, the data dir keeps them until `herd up` moves them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from herdbook.cli import client

T = TypeVar("T")


class NoBucket(Exception):
    """The bucket cannot be reached; the message says why."""


def bucket_server(store: Path) -> tuple[str, dict[str, Any], int] | None:
    """(servers, connect options, replicas for a new bucket) to reach the bucket with the
    control plane's user; None for an embedded server that is not running."""
    from herdbook.credentials import NatsAuth
    from herdbook.natsd.cluster_config import read_cluster
    from herdbook.natsd.users import CONTROL_USER, UserRegistry, auth_enabled, running_server, server_address
    control = next((u for u in UserRegistry(store).users() if u.user == CONTROL_USER), None)
    if control is None:
        return None
    cluster = read_cluster(store)
    if cluster is not None:
        auth = NatsAuth(user=control.user, password=control.password, tls_ca=cluster.tls_ca)
        return ",".join(cluster.urls), auth.resolve(None)[1], min(3, len(cluster.urls))
    address = server_address(store)
    if address is None or running_server(store) is None or not auth_enabled(store):
        return None
    host = "127.0.0.1" if address[0] in ("0.0.0.0", "::") else address[0]
    auth = NatsAuth(user=control.user, password=control.password)
    return f"nats://{host}:{address[1]}", auth.resolve(None)[1], 1


def on_bucket(store: Path, act: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``act(kv)`` on the bucket; NoBucket when no server to reach it runs here."""
    import nats

    from herdbook.natsd.token_bucket import open_bucket
    target = bucket_server(store)
    if target is None:
        raise NoBucket("no nats-server with users runs for this data dir")
    servers, options, replicas = target

    async def run() -> T:
        try:
            nc = await nats.connect(servers.split(","), connect_timeout=2,
                                    allow_reconnect=False, max_reconnect_attempts=0, **options)
        except Exception as err:  # noqa: BLE001 - one line, whatever the client raised
            raise NoBucket(f"cannot reach NATS at {servers}: {err or type(err).__name__}") \
                from err
        try:
            return await act(await open_bucket(nc.jetstream(), replicas))
        finally:
            await nc.close()
    return asyncio.run(run())


def issue_token(store: Path, name: str, read_only: bool) -> tuple[str, Any, str]:
    """(token, entry, where it went)."""
    from herdbook.natsd.http_tokens import HttpTokens
    from herdbook.natsd.token_bucket import new_token, put
    from herdbook.natsd.users import TOKENS_BUCKET
    token, entry = new_token(name, read_only)

    async def act(kv: Any) -> None:
        await put(kv, entry)
    try:
        on_bucket(store, act)
        return token, entry, f"in the KV bucket {TOKENS_BUCKET}: every replica takes it at once"
    except NoBucket as err:
        if (store / "cluster.json").exists():
            raise client.fail(str(err), client.EXIT_UNREACHABLE) from None
    token, entry = HttpTokens(store).issue(name, read_only=read_only)
    return token, entry, ("kept in the data dir: no nats-server runs here; herd up moves it "
                          f"into the KV bucket {TOKENS_BUCKET} when it starts")


def revoke_tokens(store: Path, user: str) -> tuple[int, str]:
    from herdbook.natsd.http_tokens import HttpTokens
    from herdbook.natsd.token_bucket import revoke
    spool = HttpTokens(store)
    kept = spool.revoke(user) if spool.path.exists() else 0
    try:
        gone: int = on_bucket(store, lambda kv: revoke(kv, user))
        return kept + gone, "the HTTP API refuses them at once"
    except NoBucket as err:
        if (store / "cluster.json").exists():
            raise client.fail(str(err), client.EXIT_UNREACHABLE) from None
    spool.revoke_later(user)
    return kept, "herd up revokes any in its KV bucket when it starts"


def list_tokens(store: Path) -> list[Any]:
    from herdbook.natsd.http_tokens import HttpTokens
    from herdbook.natsd.token_bucket import entries
    kept = HttpTokens(store).tokens()
    try:
        return kept + on_bucket(store, entries)
    except NoBucket:
        return kept
