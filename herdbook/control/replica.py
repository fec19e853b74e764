"""One control-plane node id, one live process (DESIGN §9 "Nothing silent").

Two `herd up` on one NATS with the same ``--node-id`` (its default is the host name, so
two replicas on one host) would both heartbeat the same requester node and take the
leader lease from each other every tick (``control/leader.py`` lets a replica restarted
under its node id take its own lease back at once): the leadership flaps for as long as
both run. So each replica first claims its node id: the key ``replica.<node id>`` in the
leases bucket, holding the process (host, pid, start, a random instance id), created if
absent and renewed every ``ttl / 3``; the bucket's TTL removes it ``ttl`` after the last
renewal. The instance id is kept in the data dir, so a replica restarted there takes its
claim back at once. A second process finds the key held by another instance and watches
it: renewed
within the watch means a live holder, and the newcomer refuses to start with one line
naming it; gone (or not renewed for a TTL and a half) means a dead predecessor, and the
newcomer takes the key. The leader lease then needs no other fence: the only process that
can hold a lease under this node id is this one.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError

from herdbook.control.errors import StartupError
from herdbook.control.leader import every_third_of, open_leases
from herdbook.files import write_atomic

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.25


class ReplicaHolder(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    pid: int
    since: float
    instance: str

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"host {self.host}, pid {self.pid}, since {when}"


INSTANCE_FILE = "replica-id"


def this_replica(data_dir: Path | None = None) -> ReplicaHolder:
    """This process, with the instance id of its data dir: a replica restarted on the same
    data dir (which one process at a time may use: ``herd.lock``) is the same instance and
    takes its claim back at once; another data dir under the same node id is not."""
    return ReplicaHolder(host=socket.gethostname(), pid=os.getpid(), since=time.time(),
                         instance=instance_id(data_dir) if data_dir else secrets.token_hex(8))


def instance_id(data_dir: Path) -> str:
    path = data_dir / INSTANCE_FILE
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        value = path.read_text().strip()
        if value:
            return value
    except OSError:
        pass
    value = secrets.token_hex(8)
    try:
        write_atomic(path, value + "\n")
    except OSError as err:   # a full disk: this process only, a restart waits a TTL
        log.warning("%s not written (%s)", path, err)
    return value


def key_of(node_id: str) -> str:
    return f"replica.{node_id}"


def held_message(node_id: str, holder: ReplicaHolder | None) -> str:
    who = holder.describe() if holder is not None else "another process"
    return (f"another control plane runs with node id {node_id} ({who}) on this NATS: "
            f"stop it, or give this one its own --node-id (the default is the host name)")


class ReplicaClaim:
    """The claim of this replica's node id (see the module's docstring)."""

    def __init__(self, nc: NATS, node_id: str, *, ttl: float, replicas: int = 1,
                 me: ReplicaHolder | None = None, data_dir: Path | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.nc = nc
        self.node_id = node_id
        self.ttl = ttl
        self.replicas = replicas
        self._me = me
        self.data_dir = data_dir
        self.monotonic = monotonic
        self.revision = 0
        self.lost: str | None = None
        """Why the claim was lost while running (another process holds it now)."""
        self._kv: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def me(self) -> ReplicaHolder:
        """This process; its instance id is read from the data dir at the first use (after
        the data dir lock made it this process's own)."""
        if self._me is None:
            self._me = this_replica(self.data_dir)
        return self._me

    @property
    def key(self) -> str:
        return key_of(self.node_id)

    async def start(self) -> None:
        """Claim the node id; ``StartupError`` (one line) when a live process holds it."""
        self._kv = await open_leases(self.nc, self.ttl, self.replicas)
        await self._claim()
        self._task = asyncio.create_task(
            every_third_of(self.ttl, self.renew, f"node id {self.node_id}: claim not renewed"),
            name="replica-claim")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._kv is not None and self.revision and self.nc.is_connected:
            try:   # free the node id at once for the next start
                await self._kv.delete(self.key, last=self.revision)
            except Exception:  # noqa: BLE001 - it expires anyway
                pass

    async def _claim(self) -> None:
        watched_since: float | None = None
        seen: int | None = None
        holder: ReplicaHolder | None = None
        while True:
            try:
                self.revision = await self._kv.create(self.key, msgspec.json.encode(self.me))
                if watched_since is not None:
                    log.warning("node id %s: taking it over from %s, which stopped renewing "
                                "it", self.node_id, holder.describe() if holder else "a process")
                return
            except Exception:  # noqa: BLE001 - held: by whom, and is it alive?
                pass
            try:
                entry = await self._kv.get(self.key)
            except KeyNotFoundError:
                continue                    # expired or deleted between the two: create
            holder = _decode(entry.value)
            if holder is not None and holder.instance == self.me.instance:
                self.revision = entry.revision
                return
            now = self.monotonic()
            if watched_since is None:
                watched_since, seen = now, entry.revision
                log.info("node id %s is held by %s: watching it for up to %.0fs",
                         self.node_id, holder.describe() if holder else "a process",
                         1.5 * self.ttl)
            elif entry.revision != seen:
                raise StartupError(held_message(self.node_id, holder))
            elif now - watched_since >= 1.5 * self.ttl:
                try:   # not renewed for a TTL and a half: its holder is gone
                    await self._kv.delete(self.key, last=entry.revision)
                except Exception:  # noqa: BLE001 - someone else moved first: look again
                    pass
                continue
            await asyncio.sleep(POLL_INTERVAL)

    async def renew(self) -> None:
        try:
            self.revision = await self._kv.update(self.key, msgspec.json.encode(self.me),
                                                  last=self.revision)
            return
        except KeyNotFoundError:
            pass
        except Exception:  # noqa: BLE001 - a wrong last revision: look at who holds it
            pass
        try:
            entry = await self._kv.get(self.key)
        except KeyNotFoundError:
            entry = None
        holder = None if entry is None else _decode(entry.value)
        if entry is None or (holder is not None and holder.instance == self.me.instance):
            # Expired (this process was away for longer than the TTL) or ours: take it.
            self.revision = (await self._kv.create(self.key, msgspec.json.encode(self.me))
                             if entry is None else entry.revision)
            return
        why = held_message(self.node_id, holder)
        if why != self.lost:
            self.lost = why
            log.error("%s (it took the node id while this one was cut off)", why)


def _decode(value: bytes | None) -> ReplicaHolder | None:
    try:
        return msgspec.json.decode(value or b"", type=ReplicaHolder)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
