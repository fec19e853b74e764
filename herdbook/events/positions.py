"""Committed positions of the reactors that act on the outside world (pyeventsourcing's
tracking records): the key ``<reactor>`` of the KV bucket ``herd_positions`` holds the
HERD_EVENTS sequence through which that reactor has acted (``{"seq", "by", "at"}``).

The notifier (``reactors/notifier.py``) is the one such reactor: it sends a webhook, runs
a command or ``scontrol``, which the log cannot take back. Every replica reads the key
when it becomes the leader and acts on what came after it, so a change folded while no
replica led (a leader change, a restart) is acted on by the next leader.

A commit never moves the position back: a replica that lost the lease and commits late
cannot make the next leader skip what it had not acted on, only act on something twice
(which the idempotency key lets a receiver drop).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from herdbook.clock import Clock
from herdbook.events.subjects import printable

log = logging.getLogger(__name__)

POSITIONS_BUCKET = "herd_positions"
POSITIONS_STREAM = f"KV_{POSITIONS_BUCKET}"
NOTIFIER_KEY = "notifier"
CAS_ATTEMPTS = 5


def positions_bucket(replicas: int = 1) -> KeyValueConfig:
    """The bucket's configuration (no TTL: a position must outlive any outage)."""
    return KeyValueConfig(bucket=POSITIONS_BUCKET, history=1, storage=StorageType.FILE,
                          replicas=replicas)


async def open_bucket(nc: NATS, replicas: int = 1) -> Any:
    """The bucket, created if it is missing (the first start with a notifier, or deleted
    from outside: what the streams guard calls to bring it back)."""
    js = nc.jetstream()
    try:
        return await js.key_value(POSITIONS_BUCKET)
    except Exception:  # noqa: BLE001 - not there (yet, or any more): create it
        return await js.create_key_value(positions_bucket(replicas))


class Position(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    """Every HERD_EVENTS sequence up to this one was acted on (or called for nothing)."""
    by: str = ""
    """The control plane (node id) that committed it."""
    at: str = ""
    """When, ISO 8601 UTC."""


def decode_position(value: bytes | None, key: str = NOTIFIER_KEY) -> int | None:
    """The sequence a stored value names; None for none, or for a value that is not one
    (logged: a key written by hand is not trusted)."""
    if not value:
        return None
    try:
        seq = msgspec.json.decode(value, type=Position).seq
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        log.warning("%s.%s does not hold a position (%s); ignored", POSITIONS_BUCKET,
                    key, printable(str(err)))
        return None
    return seq if seq >= 0 else None


class KvPosition:
    """One reactor's committed position in ``herd_positions``, the bucket created if it
    is missing (first start, or deleted from outside)."""

    def __init__(self, nc: NATS, key: str, *, holder: str, clock: Clock,
                 replicas: int = 1) -> None:
        self.nc = nc
        self.clock = clock
        self.key = key
        self.holder = holder
        self.replicas = replicas
        self._kv: Any = None

    async def _bucket(self) -> Any:
        if self._kv is None:
            self._kv = await open_bucket(self.nc, self.replicas)
        return self._kv

    async def _entry(self) -> Any:
        for again in (True, False):
            kv = await self._bucket()
            try:
                return await kv.get(self.key)
            except KeyNotFoundError:   # KeyDeletedError too
                return None
            except Exception:
                self._kv = None    # the bucket may be gone: opened (or created) again
                if not again:
                    raise
        return None

    async def read(self) -> int | None:
        """The committed sequence; None where none was ever committed."""
        entry = await self._entry()
        return None if entry is None else decode_position(entry.value, self.key)

    async def commit(self, seq: int) -> int:
        """Store ``seq`` unless a later position is stored already; returns the stored one.
        Compare-and-set on the key's revision, so two writers cannot move it back."""
        for _ in range(CAS_ATTEMPTS):
            entry = await self._entry()
            stored = None if entry is None else decode_position(entry.value, self.key)
            if stored is not None and stored >= seq:
                return stored
            body = self._body(seq)
            try:
                if entry is None:
                    await self._kv.create(self.key, body)
                else:
                    await self._kv.update(self.key, body, last=entry.revision)
                return seq
            except KeyWrongLastSequenceError:
                continue       # another writer between our read and write: read again
            except Exception:
                self._kv = None
                raise
        raise RuntimeError(f"{POSITIONS_BUCKET}.{self.key} kept changing under the commit")

    async def reset(self, seq: int) -> None:
        """Store ``seq`` even below the stored position: one past HERD_EVENTS' end names
        sequences a recreated stream hands out again, and would skip them for ever."""
        await self._bucket()
        try:
            await self._kv.put(self.key, self._body(seq))
        except Exception:
            self._kv = None
            raise

    def _body(self, seq: int) -> bytes:
        return msgspec.json.encode(Position(
            seq=seq, by=self.holder,
            at=self.clock.now().isoformat(timespec="milliseconds").replace("+00:00", "Z")))
