"""The compute-node agent: registers (once, kept in a sentinel file), heartbeats,
sends node-info and resource updates, runs this node's allocations (the executor), and
resumes by itself after NATS restarts. Stopping the agent leaves workloads running; the
next agent with the same state dir reattaches to them."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from herdbook.agent import boot, gpu, wipe
from herdbook.agent.connection import connection_callbacks, quiet_errors, server_list
from herdbook.agent.executor import STATE_FILE, Executor
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.agent.info import info_hash, node_info, resources
from herdbook.agent.protocol import NodeProtocol, send_heartbeat
from herdbook.agent.state import AgentState
from herdbook.credentials import NatsAuth, redact
from herdbook.events.agent_requests import (
    FingerprintReply,
    InjectReply,
    decode_request,
    fingerprint_request_decoder,
    inject_request_decoder,
)
from herdbook.events.alloc import AllocEvent, AllocStopRequested
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.base import Event
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.machine import LifecycleTrigger as Trigger
from herdbook.events.node import (
    NodeBootStarted,
    NodeInfo,
    NodeInfoUpdated,
    NodeWiped,
    NodeWipeFailed,
    NodeWipeStarted,
    NodeWipeStepReported,
)
from herdbook.events.states import NodeClass
from herdbook.events.store import EventStore
from herdbook.events.subjects import (
    EVENTS_STREAM,
    aggregate_filter,
    event_subject,
    fingerprint_subject,
    health_subject,
    inject_subject,
    printable,
    resources_subject,
    sync_subject,
    validate_id,
)
from herdbook.events.sync import SyncedEvent, SyncRequest, sync_reply_decoder
from herdbook.projector.alloc_view import AllocView, apply_alloc
from herdbook.signals import stop_on_signals, stopped_by_signal

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_AWAITING = 10_000
AWAIT_LIMIT = 10.0
"""Seconds an event seen live may stay missing from the catch-up reads before the
agent stops looking for it (the periodic catch-up would still find it)."""


class _EventId(msgspec.Struct):
    event_id: str = ""


_event_id_decoder = msgspec.json.Decoder(_EventId)


def default_node_id() -> str:
    host = socket.gethostname().split(".")[0]
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in host)[:128] or "node"


@dataclass
class AgentOptions:
    server: str = "nats://127.0.0.1:4222"
    node_id: str = field(default_factory=default_node_id)
    state_dir: str = "./.herd-agent"
    labels: dict[str, str] = field(default_factory=dict)
    node_class: NodeClass = NodeClass.STANDARD
    heartbeat_interval: float = 10.0
    info_interval: float = 60.0
    resource_interval: float = 30.0
    fake_gpus: int | None = None
    instance_id: str | None = None
    boot_retry_interval: float = 10.0
    boot_attempts: int = 3
    health_interval: float = 60.0
    fake_allocs: int = 0
    """Running allocations the heartbeat reports on top of the executor's (tests, demo)."""
    state_file: str | None = None
    """Where the executor keeps its workloads [default: <state_dir>/agent-state.json]."""
    fingerprint_interval: float = 6 * 3600.0
    """The conformance fingerprint is recomputed this often (and on request)."""
    wipe_config: str | None = None
    """YAML with the wipe steps of a sensitive node (default: the real ones, or fakes
    with --fake-gpus)."""
    auth: NatsAuth | None = None
    """User and password (or a creds file) and TLS towards NATS."""
    resync_interval: float = 300.0
    """A catch-up read of this node's allocation events at least this often, on top of
    the ones after every event and reconnect."""


class Agent:
    def __init__(self, options: AgentOptions, nc: NATS | None = None,
                 nvml: gpu.NvmlLike | None = None) -> None:
        self.options = options
        self.node_id = validate_id(options.node_id)
        self.state = AgentState(options.state_dir)
        self.node = NodeProtocol(self.node_id, actor=f"agent:{self.node_id}",
                                 seqs=self.state.seq)
        self._own_nc = nc is None
        self.nc = nc
        if nvml is None and options.fake_gpus is not None:
            nvml = gpu.FakeNvml(count=options.fake_gpus, seed=self.node_id)
        elif nvml is None:
            nvml = gpu.real_nvml()
        self.nvml = nvml
        self.info: NodeInfo | None = None
        self.health = HealthMonitor(nvml)
        self.fingerprint = ""
        self._fingerprint_sent: str | None = None
        self.wipe_steps = wipe.load_steps(options.wipe_config, options.fake_gpus is not None)
        self._wiping: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        self._stop = asyncio.Event()
        self._store: EventStore | None = None
        self.allocs: dict[str, AllocView] = {}
        """This node's allocations, folded from the stream."""
        self._alloc_seq = 0
        self._resync = asyncio.Event()
        self._resync.set()
        self._awaiting: dict[str, float] = {}
        """Ids of events seen on the core subscription that no catch-up returned yet."""
        self.executor = Executor(
            self.node_id, self.state.dir, self._report,
            state_file=options.state_file or self.state.dir / STATE_FILE, actor=self.actor,
            requeue_allowed=options.node_class is not NodeClass.SENSITIVE)

    async def connect(self) -> NATS:
        _, auth = (self.options.auth or NatsAuth()).resolve(self.options.server)
        delay = 0.5
        while not self._stop.is_set():
            try:
                return await nats.connect(
                    server_list(self.options.server), name=f"herd-agent:{self.node_id}",
                    max_reconnect_attempts=-1, reconnect_time_wait=1, connect_timeout=3,
                    allow_reconnect=True, error_cb=quiet_errors,
                    **connection_callbacks(on_reconnect=self._resync.set),
                    **auth)
            except Exception as err:  # noqa: BLE001 - the server may come later
                log.warning("cannot reach NATS at %s (%s); retrying in %.0fs",
                            redact(self.options.server), err, delay)
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except TimeoutError:
                    pass
                delay = min(delay * 2, 10.0)
        raise asyncio.CancelledError

    def collect_info(self) -> NodeInfo:
        return node_info(self.options.labels, self.options.node_class, gpu.inventory(self.nvml),
                         self.options.instance_id)

    async def run(self) -> None:
        if self.nc is None:
            self.nc = await self.connect()
        store = self._store = EventStore(self.nc.jetstream(), direct=True)
        self.info = self.collect_info()
        self.fingerprint = boot.fingerprint(self.nvml)
        if not await self._register(store):
            await self._append(store, self.node.boot_started())
        self.registered.set()
        async def on_boot_started(msg: Any) -> None:
            await self._on_boot_started(msg, store)

        reboots = await self.nc.subscribe(event_subject("node", self.node_id, "boot_started"),
                                          cb=on_boot_started)
        injections = await self.nc.subscribe(inject_subject(self.node_id), cb=self._on_inject)

        async def on_wipe(msg: Any) -> None:
            await self._on_wipe_started(msg, store)

        wipes = await self.nc.subscribe(event_subject("node", self.node_id, "wipe_started"),
                                        cb=on_wipe)
        requests = await self.nc.subscribe(fingerprint_subject(self.node_id),
                                           cb=self._on_fingerprint_request)
        tasks = [
            asyncio.create_task(self._boot_checks(store)),
            asyncio.create_task(self._every(self.options.health_interval, self.send_health)),
            asyncio.create_task(self._every(self.options.heartbeat_interval, self.heartbeat)),
            asyncio.create_task(self._every(self.options.info_interval,
                                            lambda: self._info_update(store), first=False)),
            asyncio.create_task(self._every(self.options.resource_interval,
                                            self.send_resources)),
            asyncio.create_task(self._allocations(store)),
            asyncio.create_task(self._every(self.options.fingerprint_interval,
                                            self.refresh_fingerprint, first=False)),
        ]
        try:
            await self._stop.wait()
        finally:
            for sub in (reboots, injections, wipes, requests):
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection is gone already
                    pass
            if self._wiping is not None:
                self._wiping.cancel()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.executor.shutdown()
            if self._own_nc and self.nc is not None:
                try:
                    await asyncio.wait_for(self.nc.drain(), 1.0)
                except Exception:  # noqa: BLE001 - a server that does not answer
                    try:
                        await self.nc.close()
                    except Exception:  # noqa: BLE001 - the server is gone: nothing to close
                        pass

    async def stop(self) -> None:
        self._stop.set()

    async def _allocations(self, store: EventStore) -> None:
        """Reattach to the workloads a previous agent left, then follow this node's
        allocations without any JetStream consumer: a core subscription to
        ``herd.alloc.<self>.>`` says something happened, and a catch-up read through the
        control plane (``herd.sync.<self>.allocs``) returns, in stream order, every event
        not folded yet. It runs at start, after every event, after every reconnect and
        every ``resync_interval``, so nothing published while disconnected is missed.
        The executor sees every changed view once per catch-up (with the stop request
        just folded, if any)."""
        assert self.nc is not None
        await self.executor.reattach()
        watcher = asyncio.create_task(self.executor.run(), name="executor")
        sub = None
        try:
            sub = await self.nc.subscribe(aggregate_filter("alloc", self.node_id),
                                          cb=self._on_alloc_event)
            while not watcher.done():
                if self._awaiting:
                    self._resync.set()
                try:
                    await asyncio.wait_for(self._resync.wait(), self.options.resync_interval)
                except TimeoutError:
                    pass
                self._resync.clear()
                await self._catch_up()
                if self._awaiting:
                    # Poked by an event the stream did not show yet: look again shortly.
                    await asyncio.sleep(0.05)
            await watcher
        finally:
            watcher.cancel()
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection may be gone
                    pass

    async def _on_alloc_event(self, msg: Any) -> None:
        """An event on one of this node's allocation subjects: catch up. Its id is kept
        until a catch-up returns it (the core delivery may overtake the stream's store)."""
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        if len(self._awaiting) < MAX_AWAITING:
            self._awaiting[event.event_id] = time.monotonic()
        self._resync.set()

    async def _catch_up(self) -> None:
        """Fold every allocation event after ``_alloc_seq``, page by page, then hand each
        changed view to the executor. Asks again (backing off) until a control plane
        answers."""
        assert self.nc is not None
        stops: dict[str, AllocStopRequested] = {}
        changed: dict[str, AllocView] = {}
        delay = 0.5
        while not self._stop.is_set():
            try:
                msg = await self.nc.request(sync_subject(self.node_id),
                                            encode(SyncRequest(after=self._alloc_seq)),
                                            timeout=5.0)
                reply = sync_reply_decoder.decode(msg.data)
                if reply.error:
                    raise RuntimeError(reply.error)
            except Exception as err:  # noqa: BLE001 - no control plane yet: wait and ask again
                log.warning("cannot catch up on allocations (%s); asking again in %.1fs",
                            printable(str(err) or type(err).__name__), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            for synced in reply.events:
                self._awaiting.pop(self._event_id_of(synced), None)
                try:
                    event = bind_event(synced.subject, bytes(synced.data))
                except Unvouched as err:
                    log.warning("skipping %s: %s", printable(synced.subject, 120), err)
                    continue
                if isinstance(event, AllocEvent):
                    view = self._fold(synced.seq, event)
                    if view is not None:
                        changed[view.id] = view
                        if isinstance(event, AllocStopRequested):
                            stops[view.id] = event
            self._alloc_seq = max(self._alloc_seq, reply.last)
            if not reply.more:
                break
        now = time.monotonic()
        for event_id, since in list(self._awaiting.items()):
            if now - since > AWAIT_LIMIT:
                del self._awaiting[event_id]   # not ours to wait for any longer
        for view in changed.values():
            current = self.allocs.get(view.id)
            if current is not None:
                self._apply(current, stops.get(view.id))

    @staticmethod
    def _event_id_of(synced: SyncedEvent) -> str:
        try:
            return str(_event_id_decoder.decode(bytes(synced.data)).event_id)
        except msgspec.DecodeError:
            return ""

    def _fold(self, seq: int, event: AllocEvent) -> AllocView | None:
        """Fold one event into ``self.allocs``; None if it was seen already or concerns an
        allocation already settled and forgotten."""
        if seq <= self._alloc_seq:
            return None
        self._alloc_seq = seq
        view = apply_alloc(self.allocs.get(event.alloc_id), event, seq)
        if view is not None:
            self.allocs[event.alloc_id] = view
        return view

    def _apply(self, view: AllocView, stop: AllocStopRequested | None) -> None:
        self.executor.apply(view, stop)
        if view.terminal and self.executor.pid_of(view.id) is None:
            # Settled here: nothing more to do for it (the executor remembers its id, so a
            # late duplicate placement starts nothing). Keeps a long-lived agent small.
            del self.allocs[view.id]

    async def _report(self, event: AllocEvent) -> None:
        assert self._store is not None
        await self._append(self._store, event)

    async def _boot_checks(self, store: EventStore) -> None:
        """Run the boot check; report each result; retry a failure up to boot_attempts
        times in all (the control plane marks the node FAILED after 3 in a row)."""
        expected = (self.state.sentinel() or {}).get("gpus")
        for attempt in range(1, self.options.boot_attempts + 1):
            checks = boot.boot_check(self.nvml, expected, self.state.dir)
            report = self.node.boot_checked(checks)
            await self._append(store, report)
            if report.passed:
                log.info("%s: boot check passed", self.node_id)
                return
            log.warning("%s: boot check %d/%d failed: %s", self.node_id, attempt,
                        self.options.boot_attempts, checks)
            if attempt < self.options.boot_attempts:
                await asyncio.sleep(self.options.boot_retry_interval)

    async def refresh_fingerprint(self) -> str:
        """Recompute the conformance fingerprint; the next heartbeat carries it if it
        changed."""
        fingerprint = await asyncio.to_thread(boot.fingerprint, self.nvml)
        if fingerprint != self.fingerprint:
            log.warning("%s: conformance fingerprint changed to %s", self.node_id,
                        fingerprint[:12])
            self.fingerprint = fingerprint
        return fingerprint

    async def _on_fingerprint_request(self, msg: Any) -> None:
        """`herd node fingerprint <id>`: recompute now and heartbeat at once."""
        try:
            decode_request(fingerprint_request_decoder, msg.data)
        except ValueError as err:
            await msg.respond(msgspec.json.encode(FingerprintReply(ok=False, error=str(err))))
            return
        fingerprint = await self.refresh_fingerprint()
        await self.heartbeat()
        await msg.respond(msgspec.json.encode(FingerprintReply(ok=True,
                                                               fingerprint=fingerprint)))

    async def _on_wipe_started(self, msg: Any, store: EventStore) -> None:
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        if not isinstance(event, NodeWipeStarted):
            return
        if self._wiping is not None and not self._wiping.done():
            self._wiping.cancel()
        self._wiping = asyncio.create_task(self.wipe(store, event))

    async def wipe(self, store: EventStore, started: NodeWipeStarted) -> None:
        """Run the wipe steps in order, report each; confirm, or report the failure."""
        log.warning("%s: wipe attempt %d started by %s", self.node_id, started.attempt,
                    started.actor)
        done: list[str] = []
        for step in self.wipe_steps:
            ok, detail = await wipe.run_step(step)
            await self._append(store, NodeWipeStepReported(
                node_id=self.node_id, step=step.name, ok=ok, detail=detail, actor=self.actor,
                causation_id=started.event_id))
            if not ok:
                await self._append(store, NodeWipeFailed(
                    node_id=self.node_id, step=step.name, reason=detail, actor=self.actor,
                    causation_id=started.event_id))
                return
            done.append(step.name)
        await self._append(store, NodeWiped(node_id=self.node_id, steps=done, actor=self.actor,
                                            causation_id=started.event_id))

    async def _on_boot_started(self, msg: Any, store: EventStore) -> None:
        """A reboot was requested (`herd node reboot`): boot again, i.e. check again."""
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        if isinstance(event, NodeBootStarted) and event.trigger == Trigger.REBOOT:
            log.info("%s: reboot requested by %s; running the boot check", self.node_id,
                     event.actor)
            self.node.new_boot()
            self._fingerprint_sent = None
            asyncio.create_task(self._boot_checks(store))

    async def _register(self, store: EventStore) -> bool:
        """Register unless the sentinel says so and the stream still knows this node;
        return whether it registered."""
        assert self.info is not None and self.nc is not None
        digest = info_hash(self.info)
        sentinel = self.state.sentinel()
        if sentinel and sentinel.get("node_id") == self.node_id:
            last = await self._last_event_subject()
            if last is not None and not last.endswith(".deleted"):
                if sentinel.get("info_hash") != digest:
                    await self._append(store, NodeInfoUpdated(
                        node_id=self.node_id, info=self.info, actor=self.actor))
                    self.state.write_sentinel(self.node_id, sentinel.get("event_id", ""), digest,
                                              sentinel.get("gpus"))
                log.info("%s: already registered", self.node_id)
                return False
        event = self.node.registered(self.info)
        await self._append(store, event)
        self.state.write_sentinel(self.node_id, event.event_id, digest, len(self.info.gpus))
        log.info("%s: registered", self.node_id)
        return True

    @property
    def actor(self) -> str:
        return self.node.actor

    @property
    def boot_id(self) -> str:
        return self.node.boot_id

    async def _last_event_subject(self) -> str | None:
        assert self.nc is not None
        while True:
            try:
                msg = await self.nc.jetstream().get_last_msg(
                    EVENTS_STREAM, aggregate_filter("node", self.node_id), direct=True)
                return msg.subject
            except NotFoundError:
                return None
            except Exception as err:  # noqa: BLE001 - NATS not ready: wait and retry
                log.warning("cannot read registration state (%s); retrying", err)
                await asyncio.sleep(1.0)

    async def _append(self, store: EventStore, event: Event) -> None:
        """Append until it lands; the event id makes a retry a no-op for the server."""
        delay = 0.5
        while True:
            try:
                await store.append(event)
                return
            except Exception as err:  # noqa: BLE001 - keep trying through outages
                if self._stop.is_set():
                    raise
                log.warning("%s not stored yet (%s); retrying", event.event_name, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def _every(self, interval: float, fn: Any, first: bool = True) -> None:
        if not first:
            await asyncio.sleep(interval)
        while True:
            started = time.monotonic()
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # noqa: BLE001 - one failed tick is not fatal
                log.warning("%s failed: %s", getattr(fn, "__name__", "task"), err)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    def make_heartbeat(self) -> Heartbeat:
        # The fingerprint rides along when it changed (and once per boot).
        send_fingerprint = self._fingerprint_sent != self.fingerprint
        self._fingerprint_sent = self.fingerprint
        try:
            max_temp = gpu.max_temperature(self.nvml)
            gpu_count = self.nvml.nvmlDeviceGetCount() if self.nvml else 0
        except Exception:  # noqa: BLE001 - a failing NVML still heartbeats
            max_temp, gpu_count = None, 0
        ecc_sbe, ecc_dbe = self.health.totals()
        return self.node.heartbeat(
            gpu_count=gpu_count, max_temp_c=max_temp, ecc_sbe=ecc_sbe, ecc_dbe=ecc_dbe,
            running_allocs=self.executor.running_count + self.options.fake_allocs,
            reattaching=self.executor.reattaching,
            fingerprint=self.fingerprint if send_fingerprint else None)

    async def heartbeat(self) -> None:
        assert self.nc is not None
        await send_heartbeat(self.nc, self.make_heartbeat())

    async def send_health(self) -> None:
        """GPU check + health events, to HERD_HEALTH (acked, deduplicated, retried)."""
        assert self.nc is not None
        report = self.health.report(self.node_id, self.boot_id, time.time())
        js = self.nc.jetstream()
        data = encode(report)
        for attempt in range(5):
            try:
                await js.publish(health_subject(self.node_id), data,
                                 headers={"Nats-Msg-Id": report.report_id})
                return
            except Exception as err:  # noqa: BLE001 - retried with the same id
                if attempt == 4:
                    raise
                log.debug("health report not stored yet: %s", err)
                await asyncio.sleep(0.5 * (attempt + 1))

    async def _on_inject(self, msg: Any) -> None:
        """Fault injection into the fake NVML backend (`herd agent inject`)."""
        try:
            request = decode_request(inject_request_decoder, msg.data)
            if not isinstance(self.nvml, gpu.FakeNvml):
                raise ValueError(f"node {self.node_id} uses real NVML; fault injection needs "
                                 "an agent started with --fake-gpus")
            done = self.nvml.inject(request.fault, request.gpu, request.value)
            if request.fault == "driver":
                await self.refresh_fingerprint()
        except (ValueError, TypeError) as err:
            await msg.respond(msgspec.json.encode(InjectReply(ok=False, error=str(err))))
            return
        log.warning("%s: injected %s", self.node_id, done)
        try:
            await self.send_health()   # report at once: a fatal event must not wait a minute
        finally:
            await msg.respond(msgspec.json.encode(InjectReply(ok=True, result=done)))

    async def send_resources(self) -> None:
        assert self.nc is not None
        total = len(self.info.gpus) if self.info else 0
        await self.nc.publish(resources_subject(self.node_id),
                              encode(resources(self.node_id, self.options.state_dir, total)))

    async def _info_update(self, store: EventStore) -> None:
        """Every info_interval: re-read node info and append it when it changed."""
        info = self.collect_info()
        if info == self.info:
            return
        self.info = info
        await self._append(store, NodeInfoUpdated(node_id=self.node_id, info=info,
                                                  actor=self.actor))
        sentinel = self.state.sentinel() or {}
        self.state.write_sentinel(self.node_id, sentinel.get("event_id", ""), info_hash(info),
                                  sentinel.get("gpus"))


async def run_agent(options: AgentOptions) -> None:
    """Run until SIGTERM/SIGINT; stopped within 2 s of it whatever NATS does
    (``herdbook.signals``): workloads keep running, the state file is written."""
    agent = Agent(options)
    stop_on_signals(agent._stop)
    try:
        await agent.run()
    except asyncio.CancelledError as err:
        if not stopped_by_signal(agent._stop, err):
            raise
        agent.executor.shutdown()
