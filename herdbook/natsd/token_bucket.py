"""The HTTP API's bearer tokens, shared by every control-plane replica: the JetStream KV
bucket ``herd_http_tokens``, one key ``<user>.<sha256 of the token>`` per token, its value
``{"read_only": ..., "created_at": ...}``. Only the hash is stored (a token is 256 random
bits, printed once by `herd creds operator --http`).

Each replica watches the bucket and answers ``lookup`` from what it has seen, so a token
issued through any replica's NATS counts on all of them, and a revoked one (its keys
purged) on none, within the watch's delivery time. Without a reachable server `herd
creds` keeps a token in ``<data-dir>/nats/http_tokens.json`` (``HttpTokens``, the file
every token lived in before) and revocations in ``http_tokens.revoked``: the control
plane moves both into the bucket when it starts (revocations first), then removes them.

A bucket deleted from outside takes its tokens with it, and a revocation sent while it is
gone finds nothing to revoke: the streams guard makes the bucket again and tells
``renew``, which drops every token this replica had seen (none can be confirmed any more:
each must be issued again) and follows the new bucket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any

import msgspec
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NoKeysError

from herdbook.natsd.http_tokens import TOKEN_PREFIX, HttpToken, HttpTokens, digest
from herdbook.natsd.users import TOKENS_BUCKET, operator_user

log = logging.getLogger(__name__)


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """A key's value: what the token may do."""

    read_only: bool = False
    created_at: float = 0.0


def key_of(entry: HttpToken) -> str:
    return f"{entry.user}.{entry.sha256}"


def entry_of(key: str, value: bytes) -> HttpToken | None:
    """The token a key and value describe; None for a key of another shape."""
    user, _, sha = key.partition(".")
    if not user or len(sha) != 64:
        return None
    try:
        grant = msgspec.json.decode(value, type=Grant)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return HttpToken(user=user, sha256=sha, read_only=grant.read_only,
                     created_at=grant.created_at)


async def open_bucket(js: Any, replicas: int = 1, create: bool = True) -> Any:
    try:
        return await js.key_value(TOKENS_BUCKET)
    except BucketNotFoundError:
        if not create:
            raise
        return await js.create_key_value(KeyValueConfig(
            bucket=TOKENS_BUCKET, history=1, replicas=replicas,
            description="herdbook: HTTP API bearer tokens (SHA-256 only)"))


async def put(kv: Any, entry: HttpToken) -> None:
    await kv.put(key_of(entry), msgspec.json.encode(
        Grant(read_only=entry.read_only, created_at=entry.created_at)))


async def entries(kv: Any) -> list[HttpToken]:
    try:
        keys = await kv.keys()
    except NoKeysError:
        return []
    out = []
    for key in keys:
        try:
            got = await kv.get(key)
        except KeyNotFoundError:
            continue
        entry = entry_of(key, got.value or b"")
        if entry is not None:
            out.append(entry)
    return out


async def issue(kv: Any, name: str, read_only: bool) -> tuple[str, HttpToken]:
    token, entry = new_token(name, read_only)
    await put(kv, entry)
    return token, entry


def new_token(name: str, read_only: bool) -> tuple[str, HttpToken]:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token, HttpToken(user=operator_user(name), sha256=digest(token),
                            read_only=read_only, created_at=time.time())


async def revoke(kv: Any, user: str) -> int:
    """Purge every token of ``user``; how many there were."""
    gone = 0
    for entry in await entries(kv):
        if entry.user == user:
            await kv.purge(key_of(entry))
            gone += 1
    return gone


async def migrate(kv: Any, spool: HttpTokens) -> tuple[int, int]:
    """Move what `herd creds` kept in the data dir while no server ran into the bucket:
    first the revocations, then the tokens; return (tokens moved, users revoked)."""
    revoked = spool.revoked_users()
    for user in revoked:
        await revoke(kv, user)
    tokens = spool.tokens()
    for entry in tokens:
        await put(kv, entry)
    spool.clear()
    return len(tokens), len(revoked)


class TokenBucket:
    """One replica's view of the bucket: ``lookup`` answers from memory (the HTTP guard
    is synchronous), kept current by a watch."""

    def __init__(self, nc: Any, replicas: int, spool: HttpTokens) -> None:
        self.nc = nc
        self.replicas = replicas
        self.spool = spool
        self._by_sha: dict[str, HttpToken] = {}
        self._task: asyncio.Task[None] | None = None
        self._watcher: Any = None
        self._stopped = False

    def record_url(self, url: str) -> None:
        self.spool.record_url(url)

    async def open_bucket(self) -> Any:
        """The bucket, created if missing (at the first start; the streams guard's way
        to make it again)."""
        return await open_bucket(self.nc.jetstream(), self.replicas)

    async def start(self) -> None:
        kv = await self.open_bucket()
        if self.spool.pending():
            moved, revoked = await migrate(kv, self.spool)
            log.info("HTTP tokens: %d moved from %s and %d users' revoked, into the KV "
                     "bucket %s", moved, self.spool.dir, revoked, TOKENS_BUCKET)
        await self._watch(kv)

    async def renew(self) -> None:
        """The bucket was created again (deleted from outside): forget every token seen,
        then follow the new bucket from its start. A token of the lost bucket is refused
        from here on, even one whose revocation went nowhere while the bucket was gone."""
        if self._stopped:
            return
        before = set(self._by_sha)
        self._by_sha = {}
        await self._unwatch()
        await self._watch(await self.open_bucket())
        log.warning("HTTP tokens: the KV bucket %s was deleted and created again: the %d "
                    "tokens it held are gone and refused from now on; issue each again "
                    "(herd creds operator NAME --http)", TOKENS_BUCKET,
                    len(before - set(self._by_sha)))

    async def _watch(self, kv: Any) -> None:
        self._watcher = await kv.watchall()
        while True:     # the current keys, up to the end-of-initial-values marker
            update = await self._watcher.updates(timeout=10)
            if update is None:
                break
            self._apply(update)
        self._task = asyncio.create_task(self._follow(self._watcher))

    def _apply(self, update: Any) -> None:
        user, _, sha = str(update.key).partition(".")
        if update.operation in ("DEL", "PURGE"):
            self._by_sha.pop(sha, None)
            return
        entry = entry_of(update.key, update.value or b"")
        if entry is not None:
            self._by_sha[entry.sha256] = entry

    async def _follow(self, watcher: Any) -> None:
        while True:
            try:
                update = await watcher.updates(timeout=60)
            except TimeoutError:
                continue
            except Exception as err:  # noqa: BLE001 - a broken watch leaves the last tokens
                log.error("HTTP tokens: the watch of %s stopped: %s", TOKENS_BUCKET, err)
                return
            if update is not None:
                self._apply(update)

    async def _unwatch(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            with contextlib.suppress(Exception):   # its consumer may be gone with the bucket
                await watcher.stop()

    async def stop(self) -> None:
        self._stopped = True
        await self._unwatch()

    def lookup(self, token: str) -> HttpToken | None:
        # A dict lookup by the presented token's hash: its timing tells nothing of any
        # stored token (a preimage of a SHA-256 is out of reach).
        return self._by_sha.get(digest(token))
