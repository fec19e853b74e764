"""The fake NVML backend: ``FakeNvml`` has pynvml's function names, return values and
errors, so the agent code cannot tell it from the real one (``gpu.real_nvml``); it is what
tests and ``--fake-gpus`` use. Faults are injected into its GPUs' readings
(``FakeNvml.inject``, `herd agent inject`)."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from herdbook.agent.nvml_constants import (
    NVML_AGGREGATE_ECC,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_STRINGS,
    NVML_ERROR_UNKNOWN,
    NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_MAX_LINKS,
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    THROTTLE_GPU_IDLE,
    THROTTLE_HW_THERMAL,
    THROTTLE_SW_THERMAL,
)
from herdbook.events.faults import Fault, fault_named


@dataclass
class _FakeMemory:
    total: int
    used: int = 0
    free: int = 0


@dataclass
class FakeGpu:
    """One fake GPU: an idle H100 SXM. ``FakeNvml`` seeds the readings that differ from
    one GPU to the next; injected faults move them (``FakeNvml.inject``)."""

    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3 (fake)"
    serial: str = ""
    memory_total: int = 80 * 1024**3
    memory_used: int = 0
    base_temperature_c: int = 45
    temperature_c: int = 45
    power_mw: int = 350_000
    power_limit_mw: int = 700_000
    utilization: int = 0
    mem_utilization: int = 0
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    ecc_sbe_before: int = 0
    """Corrected errors of earlier boots: aggregate = before + volatile."""
    ecc_dbe_before: int = 0
    retired_sbe: int = 0
    retired_dbe: int = 0
    retired_pending: bool = False
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    nvlinks: list[bool] = field(default_factory=lambda: [True] * NVML_NVLINK_MAX_LINKS)
    nvlink_errors: int = 0
    pcie_replays: int = 0
    fallen_off: bool = False
    throttle_hw: int = 0
    """HW throttle reason bits injected (``throttle``): 0x8 slowdown, 0x40 thermal, 0x80
    power brake."""
    unsupported: set[str] = field(default_factory=set)
    """pynvml function names this GPU answers with NOT_SUPPORTED (a PCIe card has no
    NVLink, a consumer card no ECC, Ampere and later no page retirement)."""


PCIE_DOWNTRAIN_REPLAYS = 100
"""Replays at which the fake's PCIe link trains down to half its width (as a flaky riser
does); ``clear`` trains it back."""


@dataclass
class _FakePciInfo:
    busId: str  # noqa: N815 - pynvml's field name


def fake_bus_id(index: int) -> str:
    """The fake backend's PCI bus id of GPU ``index``, in NVML's form."""
    return f"00000000:{0x18 + index:02X}:00.0"


@dataclass
class _FakeUtil:
    gpu: int
    memory: int


@dataclass
class _FakeEvent:
    device: FakeGpu
    eventData: int  # noqa: N815 - pynvml's field name


class FakeNvmlTimeout(Exception):
    """What nvmlEventSetWait raises when no event is pending (pynvml: NVMLError_Timeout)."""


class FakeNvmlError(Exception):
    """pynvml's ``NVMLError``: a failed NVML call, with NVML's return code in ``value``
    (``NVML_ERROR_NOT_SUPPORTED``, ``NVML_ERROR_GPU_IS_LOST``, ...) and its string."""

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return NVML_ERROR_STRINGS.get(self.value, f"NVML error {self.value}")


def _seeded(seed: str, index: int) -> int:
    """A stable number per (seed, GPU): the same node reads the same values every run."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{index}".encode()).digest()[:8], "big")


def seeded_gpu(seed: str, index: int) -> FakeGpu:
    """GPU ``index`` of the fake node ``seed``: an idle H100 whose temperature, power,
    memory in use, serial and past ECC counts vary a little from GPU to GPU."""
    h = _seeded(seed, index)
    temperature = 38 + h % 9                      # 38-46 °C idle
    return FakeGpu(
        index=index, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{seed}/{index}')}",
        serial=f"165{h % 10**10:010d}", memory_used=(500 + (h >> 8) % 300) * 1024**2,
        base_temperature_c=temperature, temperature_c=temperature,
        power_mw=68_000 + (h >> 16) % 30_000,     # 68-98 W idle of 700 W
        sm_clock_mhz=1980, mem_clock_mhz=2619,
        ecc_sbe_before=(h >> 24) % 3)             # a few corrected errors in its past


@dataclass
class FakeNvml:
    """An in-memory NVML with ``count`` healthy GPUs, with pynvml's function names,
    return values and errors (``NVMLError`` is its exception class, as in pynvml)."""

    count: int = 8
    seed: str = ""
    driver_version: str = "550.54.15-fake"
    gpus: list[FakeGpu] = field(default_factory=list)

    NVMLError: ClassVar[type[FakeNvmlError]] = FakeNvmlError

    def __post_init__(self) -> None:
        if not self.gpus:
            # Stable across restarts of the same node, so its info does not "change".
            self.gpus = [seeded_gpu(self.seed, i) for i in range(self.count)]

    xid_queue: list[tuple[int, int]] = field(default_factory=list)  # (gpu, xid)
    fail_init: bool = False
    missing: int = 0
    """GPUs the bus no longer enumerates (``gpu_missing``): the count is that much lower."""

    def inject(self, word: str, gpu: int = 0, value: float | None = None) -> str:
        """Fault injection (`herd agent inject`); returns what was done. The readings
        move with the fault: a thermal fault is the temperature (and thermal throttling
        from 85 °C), ECC errors the volatile and aggregate counters (an uncorrectable one
        a pending row remap and a retired page), NVLink errors count (``nvlink_down``
        takes link ``value`` down), PCIe replays count and from 100 train the link down to
        half its width; ``remap_failed`` fails the row remapper, ``throttle`` sets HW
        throttle reasons (``value``: the bits, default 0x80, the power brake) and
        ``gpu_missing`` hides ``value`` GPUs (default 1) from the count. ``word``: a
        ``Fault``, either spelling (``events.faults``)."""
        fault = fault_named(word)
        if fault is Fault.CLEAR:
            for device in self.gpus:
                device.temperature_c, device.fallen_off = device.base_temperature_c, False
                device.nvlinks = [True] * len(device.nvlinks)
                device.pcie_width = device.pcie_width_max
                device.throttle_hw = 0
            self.xid_queue.clear()
            self.missing = 0
            return "cleared every fault"
        if fault is Fault.DRIVER:   # a driver upgrade: the conformance fingerprint changes
            self.driver_version = f"{value if value is not None else 999}-fake"
            return f"driver version {self.driver_version}"
        if fault is Fault.GPU_MISSING:
            self.missing = max(0, min(len(self.gpus), int(value if value is not None else 1)))
            return f"{self.missing} GPU(s) missing from the bus"
        if not 0 <= gpu < len(self.gpus):
            raise ValueError(f"no GPU {gpu}: this node has {len(self.gpus)}")
        device = self.gpus[gpu]
        if fault is Fault.XID:
            if value is None:
                raise ValueError("xid needs a code, e.g. `xid 79`")
            self.xid_queue.append((gpu, int(value)))
            if int(value) == 79:
                device.fallen_off = True
            return f"XID {int(value)} on GPU {gpu}"
        if fault is Fault.THERMAL:
            device.temperature_c = int(value if value is not None else 97)
            return f"GPU {gpu} at {device.temperature_c}°C"
        if fault is Fault.NVLINK_DOWN:
            link = int(value if value is not None else 0)
            if not 0 <= link < len(device.nvlinks):
                raise ValueError(f"no NVLink {link} on GPU {gpu}")
            device.nvlinks[link] = False
            return f"NVLink {link} of GPU {gpu} down"
        if fault is Fault.REMAP_FAILED:
            device.remap_failed = True
            return f"row remapping failed on GPU {gpu}"
        if fault is Fault.THROTTLE:
            device.throttle_hw = int(value if value is not None else 0x80)
            return f"GPU {gpu} throttled (reasons {device.throttle_hw:#x})"
        count = int(value if value is not None else 1)
        if fault is Fault.ECC_DBE:
            device.ecc_dbe += count
            device.retired_dbe += count
            device.retired_pending = device.remap_pending = True
            device.remapped_uncorrectable += count
        elif fault is Fault.ECC_SBE:
            device.ecc_sbe += count
        elif fault is Fault.NVLINK:
            device.nvlink_errors += count
        else:   # pcie
            device.pcie_replays += count
            if device.pcie_replays >= PCIE_DOWNTRAIN_REPLAYS:
                device.pcie_width = device.pcie_width_max // 2
        return f"{count} {fault} error(s) on GPU {gpu}"

    def _check(self, handle: FakeGpu, function: str = "", *, counter: bool = False) -> None:
        """NOT_SUPPORTED where this GPU lacks ``function``; GPU_IS_LOST once it fell off
        the bus, except for error counters (the driver keeps them, and the health
        monitor reads them to count what happened before)."""
        if function in handle.unsupported:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        if handle.fallen_off and not counter:
            raise FakeNvmlError(NVML_ERROR_GPU_IS_LOST)

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError(NVML_ERROR_DRIVER_NOT_LOADED)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus) - self.missing

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    # Identity: answered even by a GPU that fell off the bus (NVML keeps it).
    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetSerial(self, handle: FakeGpu) -> str:
        if "nvmlDeviceGetSerial" in handle.unsupported or not handle.serial:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return handle.serial

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> _FakePciInfo:
        return _FakePciInfo(busId=fake_bus_id(handle.index))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> _FakeMemory:
        if "nvmlDeviceGetMemoryInfo" in handle.unsupported:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return _FakeMemory(total=handle.memory_total, used=handle.memory_used,
                           free=handle.memory_total - handle.memory_used)

    # Readings: a GPU that fell off the bus answers none.
    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        self._check(handle, "nvmlDeviceGetTemperature")
        return handle.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetPowerUsage")
        return handle.power_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetPowerManagementLimit")
        return handle.power_limit_mw

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> _FakeUtil:
        self._check(handle, "nvmlDeviceGetUtilizationRates")
        return _FakeUtil(gpu=handle.utilization, memory=handle.mem_utilization)

    def _throttle(self, handle: FakeGpu) -> int:
        reasons = (THROTTLE_GPU_IDLE if handle.utilization == 0 else 0) | handle.throttle_hw
        if handle.temperature_c >= 85:
            reasons |= THROTTLE_SW_THERMAL
        if handle.temperature_c >= 90:
            reasons |= THROTTLE_HW_THERMAL
        return reasons

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock_type: int) -> int:
        self._check(handle, "nvmlDeviceGetClockInfo")
        if clock_type == NVML_CLOCK_MEM:
            return handle.mem_clock_mhz
        if clock_type != NVML_CLOCK_SM:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        if self._throttle(handle) & THROTTLE_HW_THERMAL:
            return handle.sm_clock_mhz // 2     # a hardware slowdown halves the clock
        if self._throttle(handle) & THROTTLE_SW_THERMAL:
            return handle.sm_clock_mhz * 3 // 4
        return handle.sm_clock_mhz

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._throttle(handle)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        """The same bits under their newer name (drivers 535 and later)."""
        self._check(handle, "nvmlDeviceGetCurrentClocksEventReasons")
        return self._throttle(handle)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int,
                                    counter_type: int) -> int:
        self._check(handle, "nvmlDeviceGetTotalEccErrors", counter=True)
        if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            volatile, before = handle.ecc_dbe, handle.ecc_dbe_before
        else:
            volatile, before = handle.ecc_sbe, handle.ecc_sbe_before
        return volatile + before if counter_type == NVML_AGGREGATE_ECC else volatile

    def nvmlDeviceGetRetiredPages(self, handle: FakeGpu, cause: int) -> list[int]:
        self._check(handle, "nvmlDeviceGetRetiredPages")
        count = (handle.retired_dbe if cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
                 else handle.retired_sbe)
        return [0x1000 * (i + 1) for i in range(count)]   # page addresses

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetRetiredPagesPendingStatus")
        return NVML_FEATURE_ENABLED if handle.retired_pending else NVML_FEATURE_DISABLED

    def nvmlDeviceGetRemappedRows(self, handle: FakeGpu) -> tuple[int, int, int, int]:
        self._check(handle, "nvmlDeviceGetRemappedRows")
        return (handle.remapped_correctable, handle.remapped_uncorrectable,
                int(handle.remap_pending), int(handle.remap_failed))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetCurrPcieLinkGeneration")
        return handle.pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetMaxPcieLinkGeneration")
        return handle.pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetCurrPcieLinkWidth")
        return handle.pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetMaxPcieLinkWidth")
        return handle.pcie_width_max

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeGpu) -> int:
        self._check(handle, "nvmlDeviceGetPcieReplayCounter", counter=True)
        return handle.pcie_replays

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        self._check(handle, "nvmlDeviceGetNvLinkState")
        if not 0 <= link < len(handle.nvlinks):
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)   # past the GPU's last link
        return NVML_FEATURE_ENABLED if handle.nvlinks[link] else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeGpu, link: int, counter: int) -> int:
        self._check(handle, "nvmlDeviceGetNvLinkErrorCounter", counter=True)
        return handle.nvlink_errors if link == 0 else 0

    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, event_types: int, event_set: object) -> None:
        pass

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> _FakeEvent:
        if not self.xid_queue:
            raise FakeNvmlTimeout("timeout")
        gpu_index, xid = self.xid_queue.pop(0)
        return _FakeEvent(device=self.gpus[gpu_index], eventData=xid)

