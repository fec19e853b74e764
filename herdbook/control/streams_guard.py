"""A stream deleted from outside comes back.

HERD_EVENTS denies message deletes and purges, but a whole-stream delete
(``$JS.API.STREAM.DELETE``) by a user allowed to make one still removes it, and then every
append and every read answers "stream not found". The guard checks the streams every
``interval`` seconds, and at once on the server's stream-deleted advisory, and recreates a
missing one with the configuration it was started with.

What the stream held is lost; the recreated stream starts after the last sequence this
control plane knew of (what it saw, what its projector folded), so the feeds that resume
from their last sequence + 1 read the new messages instead of waiting for sequences the
server hands out a second time. A stream whose readers keep positions this guard cannot
see (the health classifier decides only on a report after the last one it decided on,
another replica's feeds read past what this guard saw 2 s ago) starts at
``unreached_seq``: the time in microseconds, beyond any sequence a stream can have
reached; only HERD_EVENTS (``exact``), whose sequences the projector's lag is counted
in, starts right after what was folded.

Every replica's guard also notices a stream created again by anyone (its ``created`` time
changed) and tells ``on_recreated``: the projector rebases the view's versions on it
(``projector/rebase.py``), so the nodes the lost events named can be commanded again.

The KV buckets and the object store herdbook owns (the leader lease, the agents' liveness
settings, view snapshots) are streams too (``KV_<bucket>``, ``OBJ_<bucket>``): ``buckets``
names each with the coroutine that creates it again as its owner would (the lease's
bucket, the settings with their key written again). A bucket whose readers keep what it
held in memory (the HTTP tokens' under ``--auth``) is guarded with ``own`` once its owner
opened it, and its ``on_recreated`` is told when it was created again, here or by anyone
(the same ``created`` check as the streams').
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from herdbook.clock import Clock

log = logging.getLogger(__name__)

DELETED_ADVISORY = "$JS.EVENT.ADVISORY.STREAM.DELETED.*"

Recreate = Callable[[], Awaitable[Any]]


def unreached_seq(now: datetime) -> int:
    """A first sequence no reader of a lost stream can have reached: ``now`` in
    microseconds since 1970 (no stream stores a message a microsecond over its life)."""
    return int(now.timestamp() * 1_000_000)

OnRecreated = Callable[[str, int, str], Awaitable[None]]


class StreamsGuard:
    def __init__(self, nc: NATS, configs: list[StreamConfig], *, interval: float = 2.0,
                 floor: Callable[[str], int] = lambda stream: 0,
                 buckets: dict[str, Recreate] | None = None,
                 on_recreated: OnRecreated | None = None, exact: Collection[str] = (),
                 clock: Clock) -> None:
        """``floor(stream)``: a sequence some reader of ``stream`` already reached (the
        projector's); a recreated stream starts after it too. ``buckets``: the stream of
        each bucket herdbook owns and what creates it again. ``on_recreated(stream,
        first_seq, created)``: one of ``configs`` was created again (here or by another
        replica), from ``first_seq``, at ``created``. ``exact``: the streams that start
        right after what was read (the others at ``unreached_seq``)."""
        self.nc = nc
        self.js = nc.jetstream()
        self.configs = configs
        self.interval = interval
        self.floor = floor
        self.buckets = dict(buckets or {})
        self.on_recreated = on_recreated
        self.exact = frozenset(exact)
        self.clock = clock
        self.last_seq: dict[str, int] = {}
        """The last sequence seen in each stream."""
        self.buckets_seen: set[str] = set()
        """The buckets' streams seen here once."""
        self.bucket_readers: dict[str, Recreate] = {}
        """What to tell when a bucket given to ``own`` was created again."""
        self.created: dict[str, str] = {}
        """When each stream there now was created (a change: it was created again)."""
        self.recreated = 0
        self.checks = 0
        """Checks done (the first one at start)."""
        self._wake = asyncio.Event()
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None

    async def own(self, name: str, recreate: Recreate, on_recreated: Recreate) -> None:
        """Guard the bucket stream ``name`` from now on (its owner opened it after this
        guard started): ``recreate()`` makes it again when it is missing, and
        ``on_recreated()`` is told when it was created again, here or by anyone."""
        info = await self.js.stream_info(name)
        self.created[name] = str(info.created or "")
        self.buckets_seen.add(name)
        self.bucket_readers[name] = on_recreated
        self.buckets[name] = recreate

    async def start(self) -> None:
        await self.check()

        async def on_deleted(msg: Any) -> None:
            self._wake.set()

        self._sub = await self.nc.subscribe(DELETED_ADVISORY, cb=on_deleted)
        self._task = asyncio.create_task(self._run(), name="streams-guard")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.check()
            except Exception:  # noqa: BLE001 - disconnected: the next round tries again
                log.debug("stream check failed", exc_info=True)

    async def check(self) -> list[str]:
        """Recreate the streams and buckets that are missing; returns their names."""
        missing: list[str] = []
        for config in self.configs:
            name = str(config.name)
            try:
                info = await self.js.stream_info(name)
            except NotFoundError:
                if await self._recreate(config):
                    missing.append(name)
                continue
            self.last_seq[name] = max(self.last_seq.get(name, 0), info.state.last_seq)
            await self._seen(name, str(info.created or ""), int(info.config.first_seq or 1))
        for name, recreate in list(self.buckets.items()):
            try:
                info = await self.js.stream_info(name)
            except NotFoundError:
                # Not at the first check (start): the lease and the settings start after
                # this guard and make their buckets themselves.
                if self.checks and await self._recreate_bucket(name, recreate):
                    missing.append(name)
                continue
            self.buckets_seen.add(name)
            if name in self.bucket_readers:
                await self._seen(name, str(info.created or ""), 1)
        self.checks += 1
        return missing

    async def _seen(self, name: str, created: str, first_seq: int) -> None:
        """Record when ``name`` was created; a change means someone created it again."""
        before = self.created.get(name)
        self.created[name] = created
        if before is not None and created and before != created:
            log.warning("stream %s was created again (created %s, from sequence %d)",
                        name, created, first_seq)
            await self._tell(name, first_seq, created)

    async def _tell(self, name: str, first_seq: int, created: str) -> None:
        reader = self.bucket_readers.get(name)
        try:
            if reader is not None:
                await reader()
            elif self.on_recreated is not None:
                await self.on_recreated(name, first_seq, created)
        except Exception:
            log.exception("acting on stream %s created again failed", name)
            if reader is not None:
                self.created[name] = ""   # told again at the next check

    async def _recreate(self, config: StreamConfig) -> bool:
        name = str(config.name)
        first = max(self.last_seq.get(name, 0), self.floor(name)) + 1
        if name not in self.exact:
            first = max(first, unreached_seq(self.clock.now()))
        fresh = dataclasses.replace(config, first_seq=first) if first > 1 else config
        try:
            info = await self.js.add_stream(fresh)
        except Exception as err:  # noqa: BLE001 - e.g. another replica recreated it first
            log.warning("stream %s is missing and could not be recreated: %s", name, err)
            return False
        self.recreated += 1
        log.error("stream %s was deleted from outside: recreated it empty, from sequence %d; "
                  "what it held is lost", name, first)
        self.created[name] = str(info.created or "")
        await self._tell(name, first, self.created[name])
        return True

    async def _recreate_bucket(self, name: str, recreate: Recreate) -> bool:
        try:
            await recreate()
        except Exception as err:  # noqa: BLE001 - e.g. another replica recreated it first
            log.warning("bucket stream %s is missing and could not be recreated: %s",
                        name, err)
            return False
        if name not in self.buckets_seen:   # never there (the snapshots' before the first)
            self.buckets_seen.add(name)
            log.info("created bucket stream %s", name)
            return False
        self.recreated += 1
        log.error("bucket stream %s was deleted from outside: recreated it; what it held "
                  "is lost", name)
        if name in self.bucket_readers:
            try:
                info = await self.js.stream_info(name)
            except Exception as err:  # noqa: BLE001 - gone again: the next check sees it
                log.warning("bucket stream %s: %s", name, err)
                return True
            self.created[name] = str(info.created or "")
            await self._tell(name, 1, self.created[name])
        return True
