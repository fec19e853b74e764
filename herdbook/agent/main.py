"""The compute-node agent: registers (once, kept in a sentinel file), heartbeats,
sends node-info and resource updates, runs this node's allocations (the executor), and
resumes by itself after NATS restarts. Stopping the agent leaves workloads running; the
next agent with the same state dir reattaches to them."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

from nats.aio.client import Client as NATS

from herdbook.agent import boot, fake_nvml, gpu, kmsg, telemetry_sampler, wipe
from herdbook.agent.agent_options import AgentOptions as AgentOptions  # imported with Agent
from herdbook.agent.alloc_follow import AllocationFollower
from herdbook.agent.connection import append_until_stored, connect_until_reached
from herdbook.agent.executor import Executor
from herdbook.agent.fence import (
    Fence,
    NodeTakenOver,
    answer_holder_requests,
    taken_over_by,
    this_process,
)
from herdbook.agent.heartbeat_interval import HeartbeatPace
from herdbook.agent.infiniband import IbWatch
from herdbook.agent.info import node_info, resources
from herdbook.agent.protocol import NodeProtocol
from herdbook.agent.registration import register, remember_info
from herdbook.agent.reports import NodeReports
from herdbook.agent.state import AgentState
from herdbook.agent.task_loops import cancel_until_done, every
from herdbook.agent.workload_logs import LogServer
from herdbook.agent.workload_state import STATE_FILE
from herdbook.clock import SYSTEM_CLOCK
from herdbook.events.alloc import AllocEvent
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.base import Event
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.machine import LifecycleTrigger
from herdbook.events.node import NodeBootStarted, NodeInfo, NodeInfoUpdated, NodeWipeStarted
from herdbook.events.states import NodeClass
from herdbook.events.store import ConflictError, EventStore
from herdbook.events.subjects import (
    event_subject,
    fingerprint_subject,
    inject_subject,
    logs_subject,
    resources_subject,
    telemetry_subject,
    validate_id,
)
from herdbook.projector.alloc_view import AllocView
from herdbook.signals import stop_on_signals, stopped_by_signal

log = logging.getLogger(__name__)


class Agent:
    reports_class: type[NodeReports] = NodeReports

    def __init__(self, options: AgentOptions, nc: NATS | None = None,
                 nvml: gpu.NvmlLike | None = None) -> None:
        self.options = options
        self.clock = SYSTEM_CLOCK
        """The agent is a composition root: its parts take this clock, never a default."""
        self.node_id = validate_id(options.node_id)
        self.state = AgentState(options.state_dir)
        self.me = this_process()
        self.node = NodeProtocol(self.node_id, actor=f"agent:{self.node_id}",
                                 seqs=self.state.seq, agent=self.me)
        self.own_boots: list[str] = self.state.own_boots()
        self.taken_over: str | None = None
        """Why this agent stopped: another agent announced itself for the node."""
        self._own_nc = nc is None
        self.nc = nc
        if nvml is None and options.fake_gpus is not None:
            nvml = fake_nvml.FakeNvml(count=options.fake_gpus, seed=self.node_id)
        elif nvml is None:
            nvml = gpu.real_nvml()
        self.nvml = nvml
        self._hostname = socket.gethostname()
        self.telemetry_sent = 0
        """Telemetry samples published (tests, and a glance in a debugger)."""
        self.info: NodeInfo | None = None
        self.wipe_steps = wipe.load_steps(options.wipe_config, options.fake_gpus is not None)
        self._wiping: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        self._stop = asyncio.Event()
        self._store: EventStore | None = None
        self.executor = Executor(
            self.node_id, self.state.dir, self._report,
            state_file=options.state_file or self.state.dir / STATE_FILE, actor=self.actor,
            requeue_allowed=options.node_class is not NodeClass.SENSITIVE)
        self.reports = self.reports_class(self.node, nvml, self.executor, options.fake_allocs,
                                          clock=self.clock)
        self._deep_checks(options)
        self.pace = self.reports.pace = HeartbeatPace(self.node_id, options.node_class.value,
                                                      options.heartbeat_interval)
        self.allocations = AllocationFollower(self.node_id, self.executor, self._stop,
                                              options.resync_interval)

    @property
    def allocs(self) -> dict[str, AllocView]:
        """This node's allocations, folded from the stream."""
        return self.allocations.allocs

    @property
    def fingerprint(self) -> str:
        """The conformance fingerprint last computed."""
        return self.reports.fingerprint

    def make_heartbeat(self) -> Heartbeat:
        return self.reports.make_heartbeat()

    async def connect(self) -> NATS:
        return await connect_until_reached(
            self.options.server, self.options.auth, f"herd-agent:{self.node_id}", self._stop,
            on_reconnect=self.allocations.resync)

    def collect_info(self) -> NodeInfo:
        return node_info(self.options.labels, self.options.node_class, gpu.inventory(self.nvml),
                         self.options.instance_id)

    async def run(self) -> None:
        if self.nc is None:
            self.nc = await self.connect()
        self.reports.nc = self.nc
        await self.pace.refresh(self.nc)
        store = self._store = EventStore(self.nc, direct=True)
        self.info = self.collect_info()
        self.reports.fingerprint = boot.fingerprint(self.nvml)
        self._remember_boot()
        holder = await self._claim_and_announce(store)
        self.registered.set()

        async def on_boot_started(msg: Any) -> None:
            await self._on_boot_started(msg, store)

        reboots = await self.nc.subscribe(event_subject("node", self.node_id, "boot_started"),
                                          cb=on_boot_started)
        registrations = await self.nc.subscribe(
            event_subject("node", self.node_id, "registered"), cb=self._on_announced)
        injections = await self.nc.subscribe(inject_subject(self.node_id), cb=self.reports.on_inject)

        async def on_wipe(msg: Any) -> None:
            await self._on_wipe_started(msg, store)

        wipes = await self.nc.subscribe(event_subject("node", self.node_id, "wipe_started"),
                                        cb=on_wipe)
        requests = await self.nc.subscribe(fingerprint_subject(self.node_id),
                                           cb=self.reports.on_fingerprint_request)
        logs = await self.nc.subscribe(logs_subject(self.node_id), cb=LogServer(
            self.node_id, self.executor.alloc_dir).on_request)
        options = self.options
        kernel_log = self._kernel_log()
        tasks = [
            *([asyncio.create_task(kernel_log.follow(self.reports.send_health))]
              if kernel_log is not None else []),
            asyncio.create_task(self._boot_checks(store)),
            asyncio.create_task(every(options.health_interval, self.reports.send_health)),
            asyncio.create_task(every(lambda: self.pace.interval, self.reports.heartbeat)),
            asyncio.create_task(self.pace.follow(self.nc)),
            asyncio.create_task(every(options.info_interval, lambda: self._info_update(store),
                                      first=False)),
            asyncio.create_task(every(options.resource_interval, self.send_resources)),
            asyncio.create_task(self.allocations.follow(self.nc)),
            asyncio.create_task(every(options.fingerprint_interval,
                                      self.reports.refresh_fingerprint, first=False)),
            *([asyncio.create_task(every(options.telemetry_interval, self.send_telemetry))]
              if options.telemetry_interval is not None and self.nvml is not None else []),
        ]
        try:
            await self._stop.wait()
        finally:
            for sub in (holder, reboots, registrations, injections, wipes, requests, logs):
                try:
                    await sub.unsubscribe()
                except Exception:  # noqa: BLE001 - the connection is gone already
                    pass
            if self._wiping is not None:
                self._wiping.cancel()
            await cancel_until_done(tasks)
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

    async def _claim_and_announce(self, store: EventStore) -> Any:
        """Claim the node id (``agent/fence.py``: refused with ``NodeHeld`` when another
        live agent holds it), then announce this boot expecting what the claim saw; a
        writer in between (another agent announcing) makes it claim again. Returns the
        subscription that answers later claimants."""
        assert self.nc is not None and self.info is not None
        fence = Fence(self.nc, self.node_id, self.me, self.own_boots,
                      timeout=self._heartbeat_timeout)
        holder = None
        try:
            while True:
                last = await fence.claim()
                if holder is None:
                    holder = await answer_holder_requests(self.nc, self.node_id,
                                                          lambda: self.boot_id, self.me)
                try:
                    await register(self.node, self.state, self.info, last,
                                   lambda event, version: self._append(store, event, version))
                    return holder
                except ConflictError:
                    log.info("%s: the node changed while this agent claimed it; claiming "
                             "again", self.node_id)
        except BaseException:
            if holder is not None:
                await holder.unsubscribe()
            raise

    def _heartbeat_timeout(self) -> float:
        """The control plane's heartbeat timeout for this node's class (what the fence
        waits a silent holder out for); three heartbeat intervals while none is known."""
        settings = self.pace.settings
        timeout = None if settings is None else settings.timeout(self.options.node_class.value)
        return timeout if timeout else 3 * self.pace.interval

    def _remember_boot(self) -> None:
        """Keep this boot among the state dir's own before it is announced or heartbeats:
        a restarted agent then knows the stored heartbeat of it as its own."""
        boot_id = self.node.boot_id
        self.own_boots[:0] = [boot_id]
        try:
            self.state.remember_boot(boot_id)
        except OSError as err:
            log.warning("%s: boot %s not remembered in the state dir (%s): a restart within "
                        "the heartbeat timeout will wait that long for it", self.node_id,
                        boot_id, err)

    async def _on_announced(self, msg: Any) -> None:
        """Another agent announced a boot of this node (it took the node over while this
        one was cut off for longer than the heartbeat timeout): stop, saying so."""
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        why = taken_over_by(event, self.own_boots)
        if why is not None and self.taken_over is None:
            self.taken_over = why
            log.error("%s", why)
            self._stop.set()

    def _deep_checks(self, options: AgentOptions) -> None:
        """The deeper checks' settings (``agent.deep_checks``, ``agent.infiniband``)."""
        health = self.reports.health
        health.throttle.window = options.throttle_window
        health.expected_gpus = options.expected_gpus
        if health.expected_gpus is None:
            health.expected_gpus = (self.state.sentinel() or {}).get("gpus")
        if options.ib_sysfs != "off":
            watch = IbWatch(options.ib_sysfs)
            if watch.present:
                health.infiniband = watch
                log.info("%s: InfiniBand ports from %s", self.node_id, options.ib_sysfs)

    def _kernel_log(self) -> kmsg.KernelLog | None:
        """The kernel log monitor, if one is configured and its source can be read."""
        source = kmsg.open_source(self.options.kmsg_source)
        if source is None:
            return None
        log.info("%s: XIDs of the kernel log from %s", self.node_id, self.options.kmsg_source)
        kernel_log = kmsg.KernelLog(source, lambda: gpu.bus_ids(self.nvml),
                                    kmsg.XidMerger(clock=self.clock),
                                    self.options.kmsg_poll_interval)
        self.reports.health.kernel_log = kernel_log
        return kernel_log

    async def _report(self, event: AllocEvent) -> None:
        assert self._store is not None
        await self._append(self._store, event)

    async def _boot_checks(self, store: EventStore) -> None:
        """Run the boot check; report each result; retry a failure up to boot_attempts
        times in all (the control plane marks the node FAILED after 3 in a row)."""
        expected = (self.state.sentinel() or {}).get("gpus")
        if self.options.expected_gpus is None and expected is not None:
            self.reports.health.expected_gpus = expected   # registered just now
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
        await wipe.run_wipe(self.wipe_steps, started, self.node_id, self.actor,
                            lambda event: self._append(store, event))

    async def _on_boot_started(self, msg: Any, store: EventStore) -> None:
        """A reboot was requested (`herd node reboot`): boot again, i.e. check again."""
        try:
            event = bind_event(msg.subject, msg.data)
        except Unvouched:
            return
        if not isinstance(event, NodeBootStarted):
            return
        if event.trigger != LifecycleTrigger.REBOOT:
            await self._on_announced(msg)
            return
        log.info("%s: reboot requested by %s; running the boot check", self.node_id,
                 event.actor)
        self.node.new_boot()
        self._remember_boot()
        self.reports.new_boot()
        asyncio.create_task(self._boot_checks(store))

    @property
    def actor(self) -> str:
        return self.node.actor

    @property
    def boot_id(self) -> str:
        return self.node.boot_id

    async def _append(self, store: EventStore, event: Event,
                      expected_version: int | None = None) -> None:
        await append_until_stored(store, event, self._stop, expected_version)

    async def send_resources(self) -> None:
        assert self.nc is not None
        total = len(self.info.gpus) if self.info else 0
        await self.nc.publish(resources_subject(self.node_id),
                              encode(resources(self.node_id, self.options.state_dir, total)))

    async def send_telemetry(self) -> None:
        """One sample of every GPU on ``herd.gpu.<node>``: core publish, like the
        heartbeat (fire and forget; the stream keeps the last one, a lost sample is
        replaced by the next). Sampled in a thread: real NVML takes milliseconds per
        call, a few hundred calls for 8 GPUs, and the heartbeat must not wait for them."""
        assert self.nc is not None and self.nvml is not None
        sample = await asyncio.to_thread(telemetry_sampler.sample, self.nvml, self.node_id,
                                         self.boot_id, time.time(), self._hostname)
        if not sample.gpus:   # NVML cannot count them: the GPU check reports that
            return
        await self.nc.publish(telemetry_subject(self.node_id), encode(sample))
        self.telemetry_sent += 1

    async def _info_update(self, store: EventStore) -> None:
        """Every info_interval: re-read node info and append it when it changed."""
        info = self.collect_info()
        if info == self.info:
            return
        self.info = info
        await self._append(store, NodeInfoUpdated(node_id=self.node_id, info=info,
                                                  actor=self.actor))
        remember_info(self.state, self.node_id, info)


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
    if agent.taken_over is not None:
        raise NodeTakenOver(agent.taken_over)
