"""Heartbeats in: what this control plane knows of each node's last heartbeat.

Clock (DESIGN §3): a heartbeat's age is measured on this process's monotonic clock from
when it was observed. Heartbeats stored before this process started (read back from
HERD_HEARTBEATS) are aged against the NATS server's clock, read from the JetStream
timestamp of a probe message, so no clock skew matters.

Bounded by the fleet, not by what is published (``reactors.heartbeats``): a heartbeat
its subject does not vouch for is dead-lettered; one of a node not in the view is only
counted, and keeps no state; one of a boot the node has not announced is dropped, the
latest kept per known node until its announcement is folded.

Per shard (``events.hb_shards``): with ``lifecycle.liveness_shards`` S > 1 it reads only
the shards this replica holds (``open``/``close``, driven by ``control.shards``), each on
``herd.hb.<shard>.*``, and keeps nothing of the other shards' nodes. With S = 1 it holds
the one shard from the start, on ``herd.hb.*``, as before sharding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from herdbook.clock import Clock
from herdbook.events.authority import bind_node_report
from herdbook.events.codec import decode_heartbeat
from herdbook.events.deadletters import DeadLetters
from herdbook.events.feed import StreamFeed
from herdbook.events.hb_shards import heartbeat_filter, shard_in_subject, shard_of
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.subjects import CLOCK_PROBE_SUBJECT, HEARTBEATS_STREAM, ID_PATTERN
from herdbook.projector.node_view import NodeView
from herdbook.reactors.heartbeats import Admission, AgentConflict, NodeBeat, is_newer, judge
from herdbook.reactors.seen_column import SeenColumn

log = logging.getLogger(__name__)

MAX_RECENT_BOOTS = 16


async def probe_server_clock(nc: NATS) -> datetime:
    """The NATS server's current time: the stored timestamp of a probe message."""
    js = nc.jetstream()
    ack = await js.publish(CLOCK_PROBE_SUBJECT, b"", stream=HEARTBEATS_STREAM)
    msg = await js.get_msg(HEARTBEATS_STREAM, ack.seq)
    assert msg.time is not None
    return msg.time


MAPPING_PROBES = 8
PROBE_PREFIX = "herd-shard-probe-"


class MappingMissing(RuntimeError):
    """The NATS server does not partition the heartbeats as configured."""


async def check_mapping(nc: NATS, shards: int, timeout: float = 2.0) -> None:
    """Raise ``MappingMissing`` unless the server maps ``herd.hb.<id>`` onto the shard
    ``shard_of`` names, for a few probe ids: a replica reading shards a server does not
    make would hear no heartbeat and declare the whole fleet DEGRADED (DESIGN §9)."""
    probes = [f"{PROBE_PREFIX}{i}" for i in range(MAPPING_PROBES)]
    arrived: dict[str, str] = {}
    done = asyncio.Event()

    async def heard(msg: Msg) -> None:
        arrived[msg.subject.rsplit(".", 1)[-1]] = msg.subject
        if len(arrived) == len(probes):
            done.set()
    subs = [await nc.subscribe(f"herd.hb.{p}", cb=heard) for p in probes]
    subs += [await nc.subscribe(f"herd.hb.*.{p}", cb=heard) for p in probes]
    try:
        for probe in probes:
            await nc.publish(f"herd.hb.{probe}", b"")
        await nc.flush()
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except TimeoutError:
            pass
    finally:
        for sub in subs:
            await _unsubscribe(sub)
        js = nc.jetstream()
        for probe in probes:   # the stream captured them: they are no node's heartbeats
            for subject in (f"herd.hb.{probe}", f"herd.hb.*.{probe}"):
                try:
                    await js.purge_stream(HEARTBEATS_STREAM, subject=subject)
                except Exception:  # noqa: BLE001 - left for the reader to dead-letter
                    pass
    wrong = [p for p in probes
             if arrived.get(p) != f"herd.hb.{shard_of(p, shards)}.{p}"]
    if wrong:
        seen = arrived.get(wrong[0], "nothing")
        raise MappingMissing(
            f"lifecycle.liveness_shards is {shards} but the NATS server does not map "
            f"herd.hb.* onto {shards} shards (herd.hb.{wrong[0]} arrived as {seen}); add "
            f"the mapping (`herd nats config`, docs/scale.md) or set liveness_shards: 1")


def record(beat: NodeBeat | None, hb: Heartbeat, observed: float) -> NodeBeat:
    """The node's heartbeat state after accepting ``hb`` (observed at ``observed``)."""
    if beat is None:
        beat = NodeBeat(last_seen=observed, boot_id=hb.boot_id, seq=hb.seq)
    else:
        beat.last_seen = max(beat.last_seen, observed)
        if hb.boot_id != beat.boot_id:
            if beat.boot_id:
                beat.recent_boots = [beat.boot_id, *beat.recent_boots][:MAX_RECENT_BOOTS]
            beat.boot_id = hb.boot_id
        beat.seq = hb.seq
    beat.sent_at = hb.sent_at
    # While the agent reattaches its workloads its count is not yet known: a draining
    # node must not look empty (DRAINED) because of it.
    beat.running_allocs = None if hb.reattaching else hb.running_allocs
    beat.reattaching = hb.reattaching
    beat.gpu_count = hb.gpu_count
    beat.interval = hb.interval
    if hb.agent is not None:
        beat.agent = hb.agent
    if hb.fingerprint:
        beat.fingerprint = hb.fingerprint
    return beat


class HeartbeatIntake:
    """Reads the heartbeats (live, then the last stored one per node), judges each and
    keeps the last accepted one per known node. ``on_counted(node_id, view)`` is told
    of every heartbeat that counts."""

    def __init__(self, nc: NATS, nodes: Mapping[str, NodeView], clock: Clock,
                 on_counted: Callable[[str, NodeView], None], *, shards: int) -> None:
        self.nc = nc
        self.shards = shards
        self.held: dict[int, Any] = {0: None} if shards <= 1 else {}
        """The shards read here, each with its live subscription (None before ``open``)."""
        self._shard_of: dict[str, int] = {}
        self.nodes = nodes
        self.clock = clock
        self.on_counted = on_counted
        self.beats: dict[str, NodeBeat] = {}   # known nodes only
        self.seen = SeenColumn()
        """Each ``beats`` entry's ``last_seen`` once a boot's heartbeat counted, side by
        side for ``/v1/fleet`` (``reactors.seen_column``)."""
        self._seen_slots, self._seen_times = self.seen.slots, self.seen.times
        self.accepted = 0
        self.replays_dropped = 0
        self.unknown_dropped = 0        # heartbeats of nodes not in the view
        self.unannounced_dropped = 0    # heartbeats of a boot the node has not announced
        self.dead_letters = DeadLetters(nc, HEARTBEATS_STREAM, clock=clock.monotonic,
                                        logger=log)
        self.unannounced: dict[str, tuple[Heartbeat, float]] = {}
        """The latest heartbeat of an unannounced boot per known node, with when it was
        observed: accepted if its boot's announcement is folded after it (a race)."""
        self.conflicts: dict[str, AgentConflict] = {}
        """Per known node, the last other boot whose heartbeats were dropped while the
        current one's count (``AgentConflict``): one entry per node at most."""
        self.probe_time: datetime | None = None
        self.probe_clock = 0.0

    async def start(self) -> None:
        """Read the server's clock; with one shard, read it (``open``)."""
        self.probe_time = await probe_server_clock(self.nc)
        self.probe_clock = self.clock.monotonic()
        if self.shards <= 1:
            await self.open(0)

    def shard(self, node_id: str) -> int:
        """The node's shard (cached: FNV-1a over the id costs microseconds in Python)."""
        if self.shards <= 1:
            return 0
        shard = self._shard_of.get(node_id)
        if shard is None:
            shard = self._shard_of[node_id] = shard_of(node_id, self.shards)
        return shard

    def holds(self, node_id: str) -> bool:
        """Whether the node's heartbeats are read here."""
        return self.shards <= 1 or self.shard(node_id) in self.held

    async def open(self, shard: int) -> None:
        """Read one shard's heartbeats: live, then the last stored one of each node."""
        subject = heartbeat_filter(shard, self.shards)
        # Live heartbeats on a core subscription (the cheapest path: no consumer state;
        # a heartbeat lost to overload is tolerated by design), opened before the
        # snapshot so nothing falls between the two.
        self.held[shard] = await self.nc.subscribe(
            subject, cb=self.on_live, pending_msgs_limit=1_000_000,
            pending_bytes_limit=256 * 1024 * 1024)
        # Then the last stored heartbeat of every node, aged on the server's clock.
        snapshot = StreamFeed(self.nc, HEARTBEATS_STREAM, subject, 1, self.on_stored,
                              batch=2000, last_per_subject=True)
        await snapshot.start()
        try:
            await asyncio.wait_for(snapshot.caught_up.wait(), timeout=120)
        finally:
            await snapshot.stop()

    async def close(self, shard: int) -> list[str]:
        """Stop reading one shard and forget its nodes' heartbeats (another replica reads
        them now); returns those nodes."""
        sub = self.held.pop(shard, None)
        await _unsubscribe(sub)
        every = list(self.beats)
        gone: list[str] = []
        for i in range(0, len(every), 2000):   # in slices: 100k nodes hold the loop
            part = [n for n in every[i:i + 2000] if self.shard(n) == shard]
            for node_id in part:
                self.forget(node_id)
            gone += part
            await asyncio.sleep(0)
        return gone

    async def stop(self) -> None:
        for sub in self.held.values():
            await _unsubscribe(sub)

    async def on_live(self, msg: Msg) -> None:
        await self.on_heartbeat(msg, self.clock.monotonic())

    async def on_stored(self, msg: Msg) -> None:
        await self.on_heartbeat(msg, self.observed_at(msg))

    async def on_heartbeat(self, msg: Msg, observed: float) -> None:
        try:
            hb = decode_heartbeat(msg.data)
            bind_node_report(msg.subject, hb.node_id)
            if self.shards > 1 and shard_in_subject(msg.subject) != self.shard(hb.node_id):
                raise ValueError(f"node {hb.node_id}'s heartbeats belong on shard "
                                 f"{self.shard(hb.node_id)}, not {msg.subject}")
            if not ID_PATTERN.fullmatch(hb.boot_id):
                raise ValueError("the boot id is not a valid id")
        except Exception as err:  # noqa: BLE001 - any garbage, RecursionError included
            if not msg.subject.rsplit(".", 1)[-1].startswith(PROBE_PREFIX):
                await self.dead_letters.send(msg, f"{type(err).__name__}: {err}")
            return   # (a replica's start checked the mapping with it: no heartbeat)
        self.accept(hb, observed)

    def observed_at(self, msg: Msg) -> float:
        now = self.clock.monotonic()
        if self.probe_time is None:
            return now
        stored = msg.metadata.timestamp
        if stored >= self.probe_time:
            return now
        # Stored before we started: its age is measured on the server's clock.
        age_at_probe = (self.probe_time - stored).total_seconds()
        return self.probe_clock - age_at_probe

    def accept(self, hb: Heartbeat, observed: float) -> Admission:
        """Judge a heartbeat its subject vouches for (``reactors.heartbeats``) and, if it
        counts, record it."""
        node_id = hb.node_id
        view = self.nodes.get(node_id)
        if view is None or not self.holds(node_id):
            # Before any per-node state: garbage for made-up ids costs a counter. A
            # heartbeat that beats its node's registration is lost; the node's clock
            # starts at registration (``registered``).
            self.unknown_dropped += 1
            return Admission.UNKNOWN_NODE
        beat = self.beats.get(node_id)
        verdict = judge(beat, view.boot_id, hb.boot_id, hb.seq)
        if verdict is Admission.REPLAY:
            self.replays_dropped += 1
            self._other_boot(node_id, beat, hb, observed)
            return verdict
        if verdict is Admission.UNANNOUNCED_BOOT:
            self.unannounced_dropped += 1
            self.unannounced[node_id] = (hb, observed)
            self._other_boot(node_id, beat, hb, observed)
            return verdict
        self.accepted += 1
        beat = self.beats[node_id] = record(beat, hb, observed)
        slot = self._seen_slots.get(node_id)     # inlined SeenColumn.set: the hot path
        self._seen_times[self.seen.add(node_id) if slot is None else slot] = beat.last_seen
        conflict = self.conflicts.get(node_id)
        if conflict is not None and conflict.boot_id == hb.boot_id:
            del self.conflicts[node_id]    # that boot counts now: it was announced
        pending = self.unannounced.get(node_id)
        if pending is not None and not is_newer(beat, pending[0].boot_id, pending[0].seq):
            del self.unannounced[node_id]   # of this boot or an older one: stale
        self.on_counted(node_id, view)
        return verdict

    def _other_boot(self, node_id: str, beat: NodeBeat | None, hb: Heartbeat,
                    observed: float) -> None:
        """A dropped heartbeat of another boot than the current one: remembered as a
        possible second agent for the node (``AgentConflict``)."""
        if beat is None or not beat.boot_id or hb.boot_id == beat.boot_id:
            return
        conflict = self.conflicts.get(node_id)
        if conflict is None or conflict.boot_id != hb.boot_id:
            conflict = self.conflicts[node_id] = AgentConflict(
                boot_id=hb.boot_id, agent=hb.agent, first_seen=observed, last_seen=observed)
        conflict.last_seen = max(conflict.last_seen, observed)
        conflict.dropped += 1
        if hb.agent is not None:
            conflict.agent = hb.agent

    def agent_conflict(self, node_id: str, window: float) -> str | None:
        """Why the node has two live agents now (heard within ``window``), or None. Logged
        once per conflict, as a WARNING: neither log may stay silent about it."""
        conflict = self.conflicts.get(node_id)
        if conflict is None:
            return None
        beat = self.beats.get(node_id)
        now = self.clock.monotonic()
        if not conflict.active(beat, now, window):
            if now - conflict.last_seen > window:
                del self.conflicts[node_id]    # over: the other agent stopped
            return None
        why = conflict.describe(beat)
        if not conflict.logged:
            conflict.logged = True
            log.warning("%s: %s", node_id, why)
        return why

    def known(self, node_id: str, view: NodeView) -> None:
        """The node is in the view (it registered, or changed): a node never heard from
        is timed from now; a heartbeat held for its boot's announcement counts now."""
        if not self.holds(node_id):
            return
        if node_id not in self.beats:
            self.beats[node_id] = NodeBeat(last_seen=self.clock.monotonic(), boot_id="", seq=0)
        pending = self.unannounced.get(node_id)
        if pending is not None and pending[0].boot_id == view.boot_id:
            del self.unannounced[node_id]
            self.accept(*pending)

    def forget(self, node_id: str) -> None:
        """The node left the view (deleted): nothing of it is kept."""
        self.beats.pop(node_id, None)
        self.seen.drop(node_id)
        self.unannounced.pop(node_id, None)
        self.conflicts.pop(node_id, None)
        self._shard_of.pop(node_id, None)

    def heartbeat_age(self, node_id: str) -> float | None:
        beat = self.beats.get(node_id)
        if beat is None or beat.boot_id == "":
            return None
        return max(0.0, self.clock.monotonic() - beat.last_seen)

    @property
    def deadlettered(self) -> int:
        return self.dead_letters.count

    def stats(self) -> dict[str, int]:
        """The heartbeat counters since start, for status and metrics."""
        return {"heartbeats_accepted": self.accepted,
                "heartbeat_replays_dropped": self.replays_dropped,
                "heartbeat_unknown_node_dropped": self.unknown_dropped,
                "heartbeat_unannounced_boot_dropped": self.unannounced_dropped,
                "heartbeat_deadletters": self.deadlettered}


async def _unsubscribe(sub: Any) -> None:
    if sub is None:
        return
    try:
        await sub.unsubscribe()
    except Exception:  # noqa: BLE001 - connection may already be gone
        pass
