"""Liveness shard leases: which replica sweeps which shard (DESIGN §10, docs/scale.md).

With ``lifecycle.liveness_shards`` S > 1 each shard ``k`` has the key ``sweeper-<k>`` in
the leases bucket (``control/leader.py``: created only if absent, renewed every
``ttl / 3`` with the revision last written, gone ``ttl`` after the last renewal). Any
replica may hold any shard. The replicas find each other by their node-id claims
(``replica.<node id>``, ``control/replica.py``) and balance the shards among themselves
without talking: each holds at most ``ceil(S / R)`` of them, takes free ones up to that
and hands extras back (``plan``, pure). NATS does the distribution (the subject mapping)
and the lease bucket the mutual exclusion; herdbook builds no consensus of its own.

A shard taken is observed for one heartbeat timeout before anything is declared
(``Sweeper.take``); a lease that cannot be renewed is let go at once (another replica
may hold it now). A renewal that fails while another replica already took the shard over
leaves both sweeping it for at most a renewal interval: the expected version of every
declaration keeps the second from declaring anything (``reactors.declarations``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from nats.aio.client import Client as NATS
from nats.js.errors import KeyNotFoundError, NoKeysError

from herdbook.config import Config
from herdbook.control.leader import every_third_of, open_leases
from herdbook.control.parts import Part, Service

log = logging.getLogger(__name__)

SHARD_PREFIX = "sweeper-"
REPLICA_PREFIX = "replica."


def shard_key(shard: int) -> str:
    return f"{SHARD_PREFIX}{shard}"


def shard_of_key(key: str) -> int | None:
    tail = key.removeprefix(SHARD_PREFIX)
    if tail == key or not tail.isdigit():
        return None
    return int(tail)


@dataclass(frozen=True)
class ShardPlan:
    take: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


def fair_share(shards: int, replicas: int) -> int:
    """The most shards one replica holds: ceil(S / R), R at least 1."""
    return math.ceil(shards / max(1, replicas))


def plan(shards: int, replicas: list[str], me: str, held: Iterable[int],
         taken: Iterable[int]) -> ShardPlan:
    """What this replica (``me``) does next, given the live replicas' node ids, the
    shards it holds and those others hold. Extras are handed back highest first; free
    shards are taken up to the fair share, starting at an offset given by this replica's
    rank, so that replicas starting together mostly reach for different shards (one
    that loses the race for a key tries another on its next tick)."""
    mine = sorted(set(held))
    live = sorted(set(replicas) | {me})
    share = fair_share(shards, len(live))
    if len(mine) > share:
        return ShardPlan(release=tuple(sorted(mine[share:], reverse=True)))
    busy = set(mine) | set(taken)
    free = [k for k in range(shards) if k not in busy]
    if not free or len(mine) >= share:
        return ShardPlan()
    start = (live.index(me) * share) % shards
    ordered = sorted(free, key=lambda k: (k - start) % shards)
    return ShardPlan(take=tuple(ordered[:share - len(mine)]))


class ShardWorker(Protocol):
    """What a shard's lease drives: the sweeper (liveness) and the health classifier."""

    def take(self, shard: int) -> Awaitable[None]: ...

    def release(self, shard: int) -> Awaitable[None]: ...


class ShardSweeper(ShardWorker, Protocol):
    """``reactors.sweeper.Sweeper``: its status names each shard's holder."""

    shard_holders: Callable[[], dict[str, str]]


class Sharded(ShardWorker, Protocol):
    """``reactors.classifier.HealthClassifier``: told the shard count first."""

    def shard(self, shards: int) -> None: ...


class ShardWork:
    """Everything the holder of a shard does for its nodes, taken and released together:
    the classifier first (it classifies the reports it kept at once), then the sweeper
    (reading the shard's heartbeats can take seconds)."""

    def __init__(self, *workers: ShardWorker) -> None:
        self.workers = workers

    async def take(self, shard: int) -> None:
        for worker in self.workers:
            await worker.take(shard)

    async def release(self, shard: int) -> None:
        for worker in self.workers:
            await worker.release(shard)


class ShardLeases:
    """Holds, renews, takes and hands back shard leases for one replica (see above)."""

    def __init__(self, nc: NATS, holder: str, sweeper: ShardWorker, *, shards: int,
                 ttl: float, replicas: int = 1) -> None:
        self.nc = nc
        self.holder = holder
        self.sweeper = sweeper
        self.shards = shards
        self.ttl = ttl
        self.replicas = replicas
        self.revisions: dict[int, int] = {}
        """The shards held here, each with its key's last revision."""
        self.holders: dict[int, str] = {}
        """Every shard's holder as last read (all replicas'), for status and metrics."""
        self.peers: list[str] = []
        """The live replicas' node ids, as last read."""
        self.takeovers = 0
        self._starting: dict[int, asyncio.Task[None]] = {}
        """Shards won whose sweeping is starting (reading their stored heartbeats takes
        seconds at 100k nodes: not on the renewal's path, or the other leases lapse)."""
        self._kv: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._kv = await open_leases(self.nc, self.ttl, self.replicas)
        await self.tick()
        self._task = asyncio.create_task(
            every_third_of(self.ttl, self.tick, "liveness shard leases"), name="shard-leases")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for shard in sorted(self.revisions):
            await self._hand_back(shard, "stopping")

    async def tick(self) -> None:
        await self._renew()
        keys = await self._keys()
        self.peers = sorted(k.removeprefix(REPLICA_PREFIX) for k in keys
                            if k.startswith(REPLICA_PREFIX))
        taken = {s for k in keys if (s := shard_of_key(k)) is not None
                 and s not in self.revisions and s < self.shards}
        step = plan(self.shards, self.peers, self.holder, self.revisions, taken)
        for shard in step.release:
            await self._hand_back(shard, f"{len(self.peers)} replicas share "
                                         f"{self.shards} shards")
        for shard in step.take:
            await self._take(shard)
        await self._read_holders(keys)

    async def _renew(self) -> None:
        for shard, revision in list(self.revisions.items()):
            try:
                self.revisions[shard] = await self._kv.update(
                    shard_key(shard), self.holder.encode(), last=revision)
            except Exception as err:  # noqa: BLE001 - expired, taken, or NATS away
                log.warning("liveness shard %d: lease not renewed (%s): no longer sweeping "
                            "it", shard, err)
                self.revisions.pop(shard, None)
                await self._stop_sweeping(shard)

    async def _take(self, shard: int) -> None:
        key = shard_key(shard)
        try:
            revision = await self._kv.create(key, self.holder.encode())
        except Exception:  # noqa: BLE001 - held: by this replica before a restart?
            try:
                entry = await self._kv.get(key)
            except Exception:  # noqa: BLE001 - gone meanwhile: the next tick tries
                return
            if entry.value != self.holder.encode():
                return
            revision = await self._kv.update(key, self.holder.encode(), last=entry.revision)
        self.revisions[shard] = revision
        self.takeovers += 1
        self._starting[shard] = asyncio.create_task(self._sweep(shard),
                                                    name=f"liveness-shard-{shard}")

    async def _sweep(self, shard: int) -> None:
        try:
            await self.sweeper.take(shard)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("liveness shard %d: could not start sweeping it", shard)
            self._starting.pop(shard, None)
            await self._hand_back(shard, "its start failed")
        else:
            self._starting.pop(shard, None)

    async def _stop_sweeping(self, shard: int) -> None:
        task = self._starting.pop(shard, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.sweeper.release(shard)

    async def _hand_back(self, shard: int, why: str) -> None:
        revision = self.revisions.pop(shard, None)
        await self._stop_sweeping(shard)
        log.info("liveness shard %d handed back: %s", shard, why)
        if revision is None or not self.nc.is_connected:
            return
        try:   # free it at once instead of after the TTL
            await self._kv.delete(shard_key(shard), last=revision)
        except Exception:  # noqa: BLE001 - it expires anyway
            pass

    async def _keys(self) -> list[str]:
        try:
            return list(await self._kv.keys())
        except NoKeysError:
            return []

    async def _read_holders(self, keys: list[str]) -> None:
        holders: dict[int, str] = {}
        for key in keys:
            shard = shard_of_key(key)
            if shard is None:
                continue
            if shard in self.revisions:
                holders[shard] = self.holder
                continue
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:
                continue
            holders[shard] = (entry.value or b"").decode(errors="replace")
        self.holders = holders

    def status(self) -> dict[str, str]:
        """Shard -> the replica holding it ("" when none does), for status and metrics."""
        return {str(k): self.holders.get(k, "") for k in range(self.shards)}


def shard_leases(cfg: Config, nc: NATS, node_id: str, sweeper: ShardSweeper,
                 classifier: Sharded | None = None) -> list[Part]:
    """With liveness shards, the leases that say which shards this replica sweeps and
    whose nodes' health reports it classifies; none with one shard: every replica
    sweeps and classifies the whole fleet, as before sharding."""
    shards = cfg.lifecycle.liveness_shards
    if shards <= 1:
        return []
    work: ShardWorker = sweeper
    if classifier is not None:
        classifier.shard(shards)
        work = ShardWork(classifier, sweeper)
    leases = ShardLeases(nc, node_id, work, shards=shards, ttl=float(cfg.leader_ttl),
                         replicas=cfg.nats.replicas)
    sweeper.shard_holders = leases.status
    return [Service("liveness shard leases", leases.start, leases.stop)]
