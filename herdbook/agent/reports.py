"""What the agent tells the control plane about its node between events: the heartbeat
(with the conformance fingerprint when it changed), the health report to HERD_HEALTH,
and the answers to the two requests that make it report at once (`herd agent inject`,
`herd node fingerprint`)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
from nats.aio.client import Client as NATS

from herdbook.agent import boot, fake_gpu_file, fake_nvml, gpu
from herdbook.agent.executor import Executor
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.agent.heartbeat_interval import HeartbeatPace
from herdbook.agent.protocol import NodeProtocol, send_heartbeat
from herdbook.backoff import Backoff
from herdbook.clock import Clock
from herdbook.events.agent_requests import (
    FingerprintReply,
    InjectReply,
    decode_request,
    fingerprint_request_decoder,
    inject_request_decoder,
)
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.subjects import health_subject

log = logging.getLogger(__name__)
HEALTH_RETRY = Backoff(0.5, factor=1.0, step=0.5)
"""A health report not stored yet: again after 0.5 s, 1, 1.5, 2 (five tries in all)."""


class NodeReports:
    def __init__(self, node: NodeProtocol, nvml: gpu.NvmlLike | None, executor: Executor,
                 fake_allocs: int = 0, *, clock: Clock) -> None:
        self.node = node
        self.nvml = nvml
        self.executor = executor
        self.fake_allocs = fake_allocs
        self.health = HealthMonitor(nvml, clock=clock)
        self.nc: NATS | None = None
        self.fingerprint = ""
        self._fingerprint_sent: str | None = None
        self.pace: HeartbeatPace | None = None
        """How often the heartbeat goes (``agent.liveness``): each one says so."""
        self.fake_gpus = (fake_gpu_file.expose(nvml, node.node_id, executor)
                          if isinstance(nvml, fake_nvml.FakeNvml) else None)
        """Fake GPUs: the file that shows them to allocations (``HERD_FAKE_GPUS``)."""

    def new_boot(self) -> None:
        """The next heartbeat carries the fingerprint again."""
        self._fingerprint_sent = None

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
            running_allocs=self.executor.running_count + self.fake_allocs,
            reattaching=self.executor.reattaching,
            fingerprint=self.fingerprint if send_fingerprint else None,
            interval=None if self.pace is None else self.pace.interval)

    async def heartbeat(self) -> None:
        assert self.nc is not None
        await send_heartbeat(self.nc, self.make_heartbeat())

    async def send_health(self) -> None:
        """GPU check + health events, to HERD_HEALTH (acked, deduplicated, retried)."""
        assert self.nc is not None
        node_id = self.node.node_id
        report = self.health.report(node_id, self.node.boot_id, time.time())
        js = self.nc.jetstream()
        data = encode(report)
        for attempt in range(5):
            try:
                await js.publish(health_subject(node_id), data,
                                 headers={"Nats-Msg-Id": report.report_id})
                return
            except Exception as err:  # noqa: BLE001 - retried with the same id
                if attempt == 4:
                    raise
                log.debug("health report not stored yet: %s", err)
                await asyncio.sleep(HEALTH_RETRY.nth(attempt))

    async def refresh_fingerprint(self) -> str:
        """Recompute the conformance fingerprint; the next heartbeat carries it if it
        changed."""
        fingerprint = await asyncio.to_thread(boot.fingerprint, self.nvml)
        if fingerprint != self.fingerprint:
            log.warning("%s: conformance fingerprint changed to %s", self.node.node_id,
                        fingerprint[:12])
            self.fingerprint = fingerprint
        return fingerprint

    async def on_fingerprint_request(self, msg: Any) -> None:
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

    async def on_inject(self, msg: Any) -> None:
        """Fault injection into the fake NVML backend (`herd agent inject`)."""
        node_id = self.node.node_id
        try:
            request = decode_request(inject_request_decoder, msg.data)
            if not isinstance(self.nvml, fake_nvml.FakeNvml):
                raise ValueError(f"node {node_id} uses real NVML; fault injection needs "
                                 "an agent started with --fake-gpus")
            done = self.nvml.inject(request.fault, request.gpu, request.value)
            if self.fake_gpus is not None:   # what a check running here now reads
                fake_gpu_file.write(self.nvml, node_id, self.fake_gpus)
            if request.fault == "driver":
                await self.refresh_fingerprint()
        except (ValueError, TypeError) as err:
            await msg.respond(msgspec.json.encode(InjectReply(ok=False, error=str(err))))
            return
        log.warning("%s: injected %s", node_id, done)
        try:
            await self.send_health()   # report at once: a fatal event must not wait a minute
        finally:
            await msg.respond(msgspec.json.encode(InjectReply(ok=True, result=done)))
