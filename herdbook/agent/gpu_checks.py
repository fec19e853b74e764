"""The agent's GPU check and health-event check (Navarch), through any NVML-like backend.

A failed NVML call is itself an unhealthy result. Counters (ECC, NVLink, PCIe) are
reported as deltas since the previous check, so one burst is one event. The deeper
checks (``deep_checks``: row remaps, HW throttling over a window, PCIe link, NVLink
links, GPU count; ``infiniband``: ports down or flapping) read the same telemetry
readers (``telemetry``) and add their events to each report.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from herdbook.agent import deep_checks, gpu, nvml_constants, telemetry_sampler
from herdbook.agent.infiniband import IbWatch
from herdbook.clock import Clock
from herdbook.events.health_report import CheckResult, GpuEvent, HealthEventKind, HealthReport
from herdbook.events.telemetry import GpuReading

log = logging.getLogger(__name__)

THERMAL_REPORT_C = 85   # temperatures from here on are health events for the policy


def lacks(err: BaseException) -> bool:
    """Whether NVML's error says the GPU lacks the reading (NOT_SUPPORTED, or a driver
    without the function), not that the call failed."""
    return getattr(err, "value", None) in (nvml_constants.NVML_ERROR_NOT_SUPPORTED,
                                           nvml_constants.NVML_ERROR_FUNCTION_NOT_FOUND)


class KernelXids(Protocol):
    def merge(self, nvml_xids: list[GpuEvent]) -> list[GpuEvent]:
        """NVML's XIDs and the kernel log's since the last report, each once."""
        ...

    def switch_events(self) -> list[GpuEvent]:
        """The NVSwitch SXids of the kernel log since the last report."""
        ...


class HealthMonitor:
    def __init__(self, nvml: gpu.NvmlLike | None, *, clock: Clock,
                 throttle_window: float = deep_checks.THROTTLE_WINDOW,
                 expected_gpus: int | None = None, infiniband: IbWatch | None = None) -> None:
        backend: Any = nvml
        self.nvml = backend
        self.clock = clock
        self.throttle = deep_checks.ThrottleWatch(throttle_window)
        self.expected_gpus = expected_gpus
        """The node's GPU count (the agent's registration, or --expected-gpus); fewer is a
        ``gpu_count`` event. None: not checked."""
        self.infiniband = infiniband
        """InfiniBand ports (``agent.infiniband``); None: no such check."""
        self._links_at_start: dict[int, int] = {}
        self._counters: dict[tuple[str, int], int] = {}
        self._event_set: Any = None
        self.kernel_log: KernelXids | None = None
        if backend is not None:
            try:
                self._event_set = backend.nvmlEventSetCreate()
                for i in range(backend.nvmlDeviceGetCount()):
                    backend.nvmlDeviceRegisterEvents(
                        backend.nvmlDeviceGetHandleByIndex(i),
                        nvml_constants.NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._event_set)
            except Exception as err:  # noqa: BLE001 - XID events unavailable on this driver
                log.warning("XID events unavailable: %s", err)
                self._event_set = None
        self.baseline()

    def baseline(self) -> None:
        """Counters as they are now: only what happens after start is an event; and each
        GPU's NVLink links, so a link that later disappears counts as down."""
        self.counter_events()
        for reading in self._readings() or []:
            if reading.nvlink_up:
                self._links_at_start[reading.index] = len(reading.nvlink_up)

    def _readings(self) -> list[GpuReading] | None:
        """Every GPU's reading; None when NVML cannot count them (the GPU check says so)."""
        if self.nvml is None:
            return None
        r = telemetry_sampler.Reader(self.nvml)
        try:
            count = r.get("nvmlDeviceGetCount", then=int)
            if count is None:
                return None
            return [telemetry_sampler.read_gpu(r, i, None) for i in range(count)]
        except Exception as err:  # noqa: BLE001 - a broken NVML: the GPU and boot checks say so
            log.debug("GPU readings unavailable for the deeper checks: %s", err)
            return None

    def deep_events(self) -> list[GpuEvent]:
        """The deeper checks' findings now (``deep_checks``, ``infiniband``)."""
        events: list[GpuEvent] = []
        now = self.clock.monotonic()
        readings = self._readings()
        for reading in readings or []:
            events += deep_checks.remap_events(reading)
            events += deep_checks.pcie_link_events(reading)
            events += deep_checks.nvlink_events(reading, self._links_at_start.get(reading.index))
            events += self.throttle.observe(reading.index, reading.throttle_reasons, now)
        if readings is not None:
            events += deep_checks.gpu_count_events(len(readings), self.expected_gpus)
        if self.infiniband is not None:
            events += self.infiniband.check()
        return events

    def gpu_check(self) -> CheckResult:
        if self.nvml is None:
            return CheckResult(name="gpu", status="healthy", message="no GPU")
        metrics: dict[str, Any] = {}
        try:
            for i in range(self.nvml.nvmlDeviceGetCount()):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
                readings = metrics[str(i)] = {}
                for name, read in (
                        ("temperature_c", lambda h: self.nvml.nvmlDeviceGetTemperature(
                            h, nvml_constants.NVML_TEMPERATURE_GPU)),
                        ("power_w", lambda h: round(self.nvml.nvmlDeviceGetPowerUsage(h) / 1000,
                                                    1)),
                        ("utilization", lambda h: self.nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                        ("memory_used_bytes", lambda h: int(
                            self.nvml.nvmlDeviceGetMemoryInfo(h).used))):
                    try:
                        readings[name] = read(handle)
                    except Exception as err:  # noqa: BLE001 - sorted just below
                        if not lacks(err):
                            raise
                        # This GPU has no such reading (a card without a power sensor):
                        # absent, not a failed check.
        except Exception as err:  # noqa: BLE001 - NVML failing is the finding
            return CheckResult(name="gpu", status="unhealthy",
                               message=f"NVML call failed: {err}", metrics=metrics)
        return CheckResult(name="gpu", status="healthy", metrics=metrics)

    def counter_events(self) -> list[GpuEvent]:
        if self.nvml is None:
            return []
        events = []
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except Exception as err:  # noqa: BLE001 - the GPU check reports it
            log.debug("counter read failed: %s", err)
            return []
        counters: tuple[tuple[HealthEventKind, Callable[[Any], Any]], ...] = (
            ("ecc_sbe", lambda h: self.nvml.nvmlDeviceGetTotalEccErrors(
                h, nvml_constants.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml_constants.NVML_VOLATILE_ECC)),
            ("ecc_dbe", lambda h: self.nvml.nvmlDeviceGetTotalEccErrors(
                h, nvml_constants.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml_constants.NVML_VOLATILE_ECC)),
            ("pcie", lambda h: self.nvml.nvmlDeviceGetPcieReplayCounter(h)),
            ("nvlink", lambda h: self.nvml.nvmlDeviceGetNvLinkErrorCounter(
                h, 0, nvml_constants.NVML_NVLINK_ERROR_DL_REPLAY)))
        for i in range(count):
            for kind, read in counters:
                # Each counter on its own: a PCIe card has no NVLink counter, a consumer
                # card no ECC; one missing must not hide the others (nor other GPUs').
                try:
                    value = read(self.nvml.nvmlDeviceGetHandleByIndex(i))
                except Exception as err:  # noqa: BLE001 - unsupported counters are skipped
                    log.debug("GPU %d: %s counter not read: %s", i, kind, err)
                    continue
                before = self._counters.get((kind, i))
                self._counters[(kind, i)] = int(value)
                if before is not None and value > before:
                    events.append(GpuEvent(kind=kind, gpu=i, value=float(value - before)))
        return events

    def xid_events(self) -> list[GpuEvent]:
        if self._event_set is None:
            return []
        events = []
        for _ in range(1000):
            try:
                event = self.nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except Exception:  # noqa: BLE001 - timeout: nothing pending
                break
            index = getattr(event.device, "index", -1)
            events.append(GpuEvent(kind="xid", gpu=int(index) if isinstance(index, int) else -1,
                                   xid=int(event.eventData)))
        return events

    def thermal_events(self, check: CheckResult) -> list[GpuEvent]:
        return [GpuEvent(kind="thermal", gpu=int(i), value=float(m["temperature_c"]))
                for i, m in check.metrics.items()
                if m.get("temperature_c", 0) >= THERMAL_REPORT_C]

    def report(self, node_id: str, boot_id: str, sent_at: float) -> HealthReport:
        check = self.gpu_check()
        xids = self.xid_events()
        if self.kernel_log is not None:   # XIDs of the kernel log, seen once (agent.kmsg)
            xids = self.kernel_log.merge(xids)
        sxids = self.kernel_log.switch_events() if self.kernel_log is not None else []
        events = [*xids, *sxids, *self.thermal_events(check), *self.counter_events(),
                  *self.deep_events()]
        events_check = CheckResult(name="health_events", status="healthy",
                                   message=f"{len(events)} events")
        return HealthReport(report_id=uuid.uuid4().hex, node_id=node_id, boot_id=boot_id,
                            sent_at=sent_at, checks=(check, events_check), events=tuple(events))

    def totals(self) -> tuple[int, int]:
        """(ECC SBE, ECC DBE) totals for the heartbeat."""
        sbe = sum(v for (kind, _), v in self._counters.items() if kind == "ecc_sbe")
        dbe = sum(v for (kind, _), v in self._counters.items() if kind == "ecc_dbe")
        return sbe, dbe
