"""One node id, one live agent (DESIGN §9 "Nothing silent").

A second ``herd agent`` for a node id that a live agent holds (started on another
machine, or twice by a template) must not take the node: its registration would make
the control plane drop the live agent's heartbeats as those of an old boot, and the
node would go DOWN while its agent runs. Before it announces itself, an agent claims the
node:

1. It asks the holder: a request on ``herd.agent.<id>.holder``, answered by a running
   agent with its boot and its process (``AgentId``: host, pid, start). Any answer means
   a live holder (even one on this very state dir, started twice): refused at once.
2. Nobody answers (no agent connected, or one of a version without the responder, or a
   partitioned one): the last heartbeat of the node (HERD_HEARTBEATS) and its last event
   say who spoke last. A boot this state dir started is ourselves, restarted. Another one
   is watched until it has been silent for the node's heartbeat timeout: a newer
   heartbeat of it refuses; silence for the timeout (measured on this process's
   monotonic clock, with the stored age counted only as far as the holder's heartbeat
   interval allows, so a skewed clock cannot hide a live holder) lets the newcomer take
   over, with a WARNING naming the one it replaces.
3. The announcement (``node.registered`` or ``node.boot_started``) is appended expecting
   the node's last event seen by the claim: two agents that claim at once cannot both
   announce; the loser claims again and finds the winner's fresh announcement.

A running agent that sees a foreign boot announced for its node (it was partitioned for
longer than the timeout and was replaced) stops: ``NodeTakenOver``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from herdbook.agent.heartbeat_interval import read_settings
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.codec import decode_heartbeat
from herdbook.events.hb_shards import stored_heartbeat_subject
from herdbook.events.heartbeat import AgentId
from herdbook.events.machine import LifecycleTrigger
from herdbook.events.node import NodeBootStarted, NodeRegistered
from herdbook.events.subjects import (
    EVENTS_STREAM,
    HEARTBEATS_STREAM,
    aggregate_filter,
    holder_subject,
)

log = logging.getLogger(__name__)

ASK_TIMEOUT = 2.0
POLL_INTERVAL = 0.5


class NodeHeld(Exception):
    """Another live agent holds this node id; ``str()`` is the one line for the operator."""


class NodeTakenOver(Exception):
    """Another agent announced itself for this node while this one ran."""


class HolderReply(msgspec.Struct, frozen=True, kw_only=True):
    """What a running agent answers on ``herd.agent.<id>.holder``."""

    node_id: str
    boot_id: str
    agent: AgentId | None = None


class HolderAsk(msgspec.Struct, frozen=True, kw_only=True):
    """Who asks: logged by the holder, so both sides say a word."""

    agent: AgentId | None = None


def this_process() -> AgentId:
    return AgentId(host=socket.gethostname()[:255], pid=os.getpid(), since=time.time())


@dataclass(frozen=True)
class Signal:
    """The last word of some boot of the node: a heartbeat or an announcement."""

    boot_id: str
    agent: AgentId | None
    stream_seq: int
    """Its sequence in its stream (a newer heartbeat has a larger one)."""
    stored_at: datetime | None
    interval: float | None = None
    """The holder's heartbeat interval, when a heartbeat said it."""


@dataclass(frozen=True)
class NodeLast:
    """The node's last event: the version the announcement expects, and whether the
    node is still registered (``None`` subject: it never was, or was deleted)."""

    version: int
    subject: str | None
    announced: Signal | None
    """The last event, when it is an agent's announcement of a boot."""


def holder_message(node_id: str, boot_id: str, agent: AgentId | None, detail: str) -> str:
    who = agent.describe() if agent is not None else f"boot {boot_id}"
    return (f"node {node_id} is held by a running agent ({who}){detail}: stop that agent "
            f"first, or start this one with another --node-id")


def foreign(signal: Signal | None, own_boots: Collection[str]) -> Signal | None:
    """``signal`` when another boot than this state dir's spoke it."""
    if signal is None or not signal.boot_id or signal.boot_id in own_boots:
        return None
    return signal


def silent_enough(first_age: float, watched: float, timeout: float,
                  interval: float | None) -> bool:
    """Whether a holder whose last word was ``first_age`` seconds old (by the stored
    timestamp, on this host's clock) when the watch began, and silent for the ``watched``
    seconds since, has been silent for ``timeout``. The stored age is believed only as far
    as the watch has seen the holder's heartbeat interval pass (a heartbeat due within it
    would have come): a clock that runs ahead cannot make a live holder look dead."""
    if watched >= timeout:
        return True
    seen_a_beat = interval is not None and watched >= 1.5 * interval + 1.0
    credited = max(0.0, first_age) if seen_a_beat else 0.0
    return watched + credited >= timeout


class Fence:
    """The claim of one node id by one agent process (see the module's docstring)."""

    def __init__(self, nc: NATS, node_id: str, me: AgentId, own_boots: Collection[str], *,
                 timeout: Callable[[], float], poll: float = POLL_INTERVAL,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.nc = nc
        self.node_id = node_id
        self.me = me
        self.own_boots = own_boots
        self.timeout = timeout
        self.poll = poll
        self.monotonic = monotonic
        self.wall = wall
        self._shards: int | None = None

    async def claim(self) -> NodeLast:
        """Return the node's last event once no other live agent holds it; raise
        ``NodeHeld`` (one line) when one does."""
        await self.ask_holder()
        node = await self.node_last()
        holder = self._foreign_last(await self.last_heartbeat(), node.announced)
        if holder is None:
            return node
        first_age = self._age(holder)
        started = self.monotonic()
        log.warning("%s: the last word of this node came from another agent (%s, %.0fs "
                    "ago); watching it for up to %.0fs before taking the node over",
                    self.node_id, _who(holder), first_age, self.timeout())
        while True:
            await asyncio.sleep(self.poll)
            await self.ask_holder()
            node = await self.node_last()
            latest = self._foreign_last(await self.last_heartbeat(), node.announced)
            if latest is not None and (latest.stream_seq, latest.stored_at) != (
                    holder.stream_seq, holder.stored_at) and _newer(latest, holder):
                raise NodeHeld(holder_message(
                    self.node_id, latest.boot_id, latest.agent,
                    f"; it spoke {self.monotonic() - started:.1f}s into this agent's watch"))
            watched = self.monotonic() - started
            if silent_enough(first_age, watched, self.timeout(), holder.interval):
                log.warning("%s: taking the node over from %s, silent for the heartbeat "
                            "timeout (%.0fs)", self.node_id, _who(holder), self.timeout())
                return node

    async def ask_holder(self) -> None:
        """Raise ``NodeHeld`` when a running agent of another boot answers for the node."""
        try:
            msg = await self.nc.request(holder_subject(self.node_id),
                                        msgspec.json.encode(HolderAsk(agent=self.me)),
                                        timeout=ASK_TIMEOUT)
        except Exception:  # noqa: BLE001 - no responders, a timeout: nobody answers
            return
        try:
            reply = msgspec.json.decode(msg.data, type=HolderReply)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        # Any live answer but our own is a holder, whatever its boot: a second agent on
        # the same state dir (started twice) shares this one's boots.
        if reply.node_id == self.node_id and reply.agent != self.me:
            raise NodeHeld(holder_message(self.node_id, reply.boot_id, reply.agent, ""))

    async def node_last(self) -> NodeLast:
        js = self.nc.jetstream()
        while True:
            try:
                msg = await js.get_last_msg(EVENTS_STREAM, aggregate_filter("node", self.node_id),
                                            direct=True)
                break
            except NotFoundError:
                return NodeLast(version=0, subject=None, announced=None)
            except Exception as err:  # noqa: BLE001 - NATS not ready: wait and retry
                log.warning("cannot read node %s's last event (%s); retrying", self.node_id,
                            err)
                await asyncio.sleep(1.0)
        subject = msg.subject or ""
        announced = None
        try:
            event = bind_event(subject, msg.data or b"")
        except Unvouched:
            event = None
        if isinstance(event, NodeRegistered) or (
                isinstance(event, NodeBootStarted)
                and event.trigger == LifecycleTrigger.AGENT_STARTED.value):
            announced = Signal(boot_id=event.boot_id, agent=event.agent,
                               stream_seq=int(msg.seq or 0), stored_at=msg.time)
        return NodeLast(version=int(msg.seq or 0),
                        subject=None if subject.endswith(".deleted") else subject,
                        announced=announced)

    async def last_heartbeat(self) -> Signal | None:
        if self._shards is None:   # sharded liveness stores herd.hb.<shard>.<id>
            settings = await read_settings(self.nc)
            self._shards = settings.liveness_shards if settings is not None else 1
        try:
            msg = await self.nc.jetstream().get_last_msg(
                HEARTBEATS_STREAM, stored_heartbeat_subject(self.node_id, self._shards),
                direct=True)
            hb = decode_heartbeat(msg.data or b"")
        except Exception:  # noqa: BLE001 - none stored, garbage, or not readable: no word
            return None
        if hb.node_id != self.node_id:
            return None
        return Signal(boot_id=hb.boot_id, agent=hb.agent, stream_seq=int(msg.seq or 0),
                      stored_at=msg.time, interval=hb.interval)

    def _foreign_last(self, heartbeat: Signal | None, announced: Signal | None) -> Signal | None:
        """The newer of the last heartbeat and the last announcement, when it is another
        boot's."""
        candidates = [s for s in (foreign(heartbeat, self.own_boots),
                                  foreign(announced, self.own_boots)) if s is not None]
        if not candidates:
            return None
        return max(candidates, key=lambda s: s.stored_at.timestamp() if s.stored_at else 0.0)

    def _age(self, signal: Signal) -> float:
        if signal.stored_at is None:
            return 0.0
        return max(0.0, self.wall() - signal.stored_at.timestamp())


def _newer(latest: Signal, holder: Signal) -> bool:
    if latest.stored_at is None or holder.stored_at is None:
        return True
    return latest.stored_at > holder.stored_at


def _who(signal: Signal) -> str:
    return signal.agent.describe() if signal.agent is not None else f"boot {signal.boot_id}"


async def answer_holder_requests(nc: NATS, node_id: str, boot_id: Callable[[], str],
                                 me: AgentId) -> Any:
    """Answer ``herd.agent.<id>.holder`` for the running agent; log who asked."""

    async def on_ask(msg: Any) -> None:
        try:
            asker = msgspec.json.decode(msg.data, type=HolderAsk).agent
        except (msgspec.DecodeError, msgspec.ValidationError):
            asker = None
        if asker == me:
            return    # our own claim, asked before this process announced itself
        who = asker.describe() if asker is not None else "an unnamed process"
        log.warning("%s: another agent (%s) asked for this node; it is told this agent "
                    "holds it", node_id, who)
        await msg.respond(msgspec.json.encode(
            HolderReply(node_id=node_id, boot_id=boot_id(), agent=me)))

    return await nc.subscribe(holder_subject(node_id), cb=on_ask)


def taken_over_by(event: object, own_boots: Collection[str]) -> str | None:
    """Why this agent must stop, when ``event`` (of its own node) announces another
    agent's boot; None otherwise."""
    if isinstance(event, NodeRegistered) or (
            isinstance(event, NodeBootStarted)
            and event.trigger == LifecycleTrigger.AGENT_STARTED.value):
        if event.boot_id and event.boot_id not in own_boots:
            who = event.agent.describe() if event.agent is not None else f"boot {event.boot_id}"
            return (f"node {event.node_id} was taken over by another agent ({who}); this "
                    f"agent stops (one node id has one live agent)")
    return None
