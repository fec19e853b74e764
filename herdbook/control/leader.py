"""One leader among control-plane replicas, by a lease in a JetStream KV bucket.

The reactors that must not run twice (the scheduler's workers, the allocation reactor,
the sensitive-node timers, the instance manager and the notifier: the ``leader_only``
parts of ``control/parts.py``) run on the leader only; everything else (projector,
sweeper, approver, health classifier, API) runs on every replica and stays correct
through optimistic concurrency.

The lease is the key ``<name>`` in bucket ``herd_leases`` (TTL ``ttl``): ``create``
wins it only if nobody holds it; the holder renews it with ``update(last=revision)``
every ``ttl / 3``. A leader that dies stops renewing and the key expires; one that
cannot renew (partitioned, or another took over) steps down at once. A replica
restarted under the same node id takes its own lease back without waiting."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, NotFoundError

log = logging.getLogger(__name__)

BUCKET = "herd_leases"


async def open_leases(nc: NATS, ttl: float, replicas: int) -> Any:
    """The leases bucket (the leader lease, the replicas' node-id claims), created if
    missing; its TTL removes a key ``ttl`` after its last renewal."""
    js = nc.jetstream()
    try:
        return await js.key_value(BUCKET)
    except (NotFoundError, Exception):  # noqa: BLE001 - not there yet: create it
        return await js.create_key_value(KeyValueConfig(
            bucket=BUCKET, ttl=ttl, history=1, storage=StorageType.FILE, replicas=replicas))


async def every_third_of(ttl: float, renew: Callable[[], Awaitable[None]], what: str) -> None:
    """Renew every ``ttl / 3`` until cancelled; a failed renewal (NATS away) is one
    WARNING and the next tick tries again."""
    while True:
        await asyncio.sleep(ttl / 3)
        try:
            await renew()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - NATS away: try again next tick
            log.warning("%s: %s", what, err)


class LeaderLease:
    def __init__(self, nc: NATS, holder: str, *, name: str = "control", ttl: float = 6.0,
                 replicas: int = 1,
                 on_elected: Callable[[], Awaitable[None]] | None = None,
                 on_lost: Callable[[], Awaitable[None]] | None = None) -> None:
        self.nc = nc
        self.holder = holder
        self.name = name
        self.ttl = ttl
        self.replicas = replicas
        self.on_elected = on_elected
        self.on_lost = on_lost
        self.leader = False
        self.revision = 0
        self.elections = 0
        self._kv: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the bucket and try once (so a lone replica leads when start returns)."""
        await self.open_bucket()
        await self._tick()
        self._task = asyncio.create_task(every_third_of(self.ttl, self._tick, "leader lease"),
                                         name="leader-lease")

    async def open_bucket(self) -> None:
        """Open the lease's bucket, created if missing: at the first start, and when it
        was deleted from outside (the streams guard calls this; the next tick elects a
        leader again without a restart)."""
        self._kv = await open_leases(self.nc, self.ttl, self.replicas)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self.leader:
            await self._step_down("stopping")
            if not self.nc.is_connected:
                return      # no server to hand over through (it died): not waited for
            try:   # hand over at once instead of after the TTL
                await self._kv.delete(self.name, last=self.revision)
            except Exception:  # noqa: BLE001 - it expires anyway
                pass

    async def _tick(self) -> None:
        if self.leader:
            try:
                self.revision = await self._kv.update(self.name, self.holder.encode(),
                                                      last=self.revision)
            except Exception as err:  # noqa: BLE001 - lost it (expired, taken, or no NATS)
                await self._step_down(f"could not renew the lease: {err}")
            return
        try:
            self.revision = await self._kv.create(self.name, self.holder.encode())
        except Exception:  # noqa: BLE001 - held by someone: is it ourselves, restarted?
            try:
                entry = await self._kv.get(self.name)
            except KeyNotFoundError:
                return
            if entry.value != self.holder.encode():
                return
            self.revision = await self._kv.update(self.name, self.holder.encode(),
                                                  last=entry.revision)
        self.leader = True
        self.elections += 1
        log.info("%s is the leader", self.holder)
        if self.on_elected is not None:
            try:
                await self.on_elected()
            except Exception as err:
                # A leader without its reactors is no leader: step down (what started
                # stops) and win it again on a later tick, which starts them again.
                log.exception("%s could not start what the leader runs", self.holder)
                await self._step_down(f"starting failed: {err}")

    async def _step_down(self, why: str) -> None:
        if not self.leader:
            return
        self.leader = False
        # Handing over on a clean stop is the normal end, not a warning.
        log.log(logging.INFO if why == "stopping" else logging.WARNING,
                "%s is no longer the leader: %s", self.holder, why)
        if self.on_lost is not None:
            await self.on_lost()
