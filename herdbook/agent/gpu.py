"""GPU inventory through NVML. ``FakeNvml`` has the same function names as pynvml, so
the agent code cannot tell them apart; it is what tests and ``--fake-gpus`` use."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from herdbook.events.agent_requests import FAULTS
from herdbook.events.node import GpuInfo

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 8
NVML_NVLINK_ERROR_DL_REPLAY = 0


class NvmlLike(Protocol):
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...


@dataclass
class _FakeMemory:
    total: int
    used: int = 0
    free: int = 0


@dataclass
class FakeGpu:
    index: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3 (fake)"
    memory_total: int = 80 * 1024**3
    temperature_c: int = 45
    power_mw: int = 350_000
    utilization: int = 0
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    nvlink_errors: int = 0
    pcie_replays: int = 0
    fallen_off: bool = False


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
    """A failed NVML call, e.g. on a GPU that fell off the bus."""




@dataclass
class FakeNvml:
    """An in-memory NVML with ``count`` healthy GPUs."""

    count: int = 8
    seed: str = ""
    driver_version: str = "550.54.15-fake"
    gpus: list[FakeGpu] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.gpus:
            # Stable across restarts of the same node, so its info does not "change".
            self.gpus = [FakeGpu(index=i, uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'{self.seed}/{i}')}")
                         for i in range(self.count)]

    xid_queue: list[tuple[int, int]] = field(default_factory=list)  # (gpu, xid)
    fail_init: bool = False

    def inject(self, fault: str, gpu: int = 0, value: float | None = None) -> str:
        """Fault injection (`herd agent inject`); returns what was done."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {', '.join(FAULTS)}")
        if fault == "clear":
            for device in self.gpus:
                device.temperature_c, device.fallen_off = 45, False
            self.xid_queue.clear()
            return "cleared every fault"
        if fault == "driver":   # a driver upgrade: the conformance fingerprint changes
            self.driver_version = f"{value if value is not None else 999}-fake"
            return f"driver version {self.driver_version}"
        if not 0 <= gpu < len(self.gpus):
            raise ValueError(f"no GPU {gpu}: this node has {len(self.gpus)}")
        device = self.gpus[gpu]
        if fault == "xid":
            if value is None:
                raise ValueError("xid needs a code, e.g. `xid 79`")
            self.xid_queue.append((gpu, int(value)))
            if int(value) == 79:
                device.fallen_off = True
            return f"XID {int(value)} on GPU {gpu}"
        if fault == "thermal":
            device.temperature_c = int(value if value is not None else 97)
            return f"GPU {gpu} at {device.temperature_c}°C"
        count = int(value if value is not None else 1)
        attribute = {"ecc-dbe": "ecc_dbe", "ecc-sbe": "ecc_sbe", "nvlink": "nvlink_errors",
                     "pcie": "pcie_replays"}[fault]
        setattr(device, attribute, getattr(device, attribute) + count)
        return f"{count} {fault} error(s) on GPU {gpu}"

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("NVML init failed (fake)")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return handle.uuid

    def nvmlDeviceGetPciInfo(self, handle: FakeGpu) -> _FakePciInfo:
        return _FakePciInfo(busId=fake_bus_id(handle.index))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> _FakeMemory:
        return _FakeMemory(total=handle.memory_total, free=handle.memory_total)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        self._check(handle)
        return handle.temperature_c

    def _check(self, handle: FakeGpu) -> None:
        if handle.fallen_off:
            raise FakeNvmlError(f"GPU {handle.index} is lost (fallen off the bus)")

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._check(handle)
        return handle.power_mw

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> _FakeUtil:
        self._check(handle)
        return _FakeUtil(gpu=handle.utilization, memory=0)

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int,
                                    counter_type: int) -> int:
        return handle.ecc_dbe if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else handle.ecc_sbe

    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeGpu) -> int:
        return handle.pcie_replays

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: FakeGpu, link: int, counter: int) -> int:
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


def real_nvml() -> NvmlLike | None:
    """pynvml if it is installed and a driver answers, else None (a CPU node)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: a CPU-only node
        return None
    return pynvml  # type: ignore[no-any-return]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def inventory(nvml: NvmlLike | None) -> tuple[GpuInfo, ...]:
    if nvml is None:
        return ()
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        out.append(GpuInfo(index=i, uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                           name=_text(nvml.nvmlDeviceGetName(handle)),
                           memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                           driver_version=driver))
    return tuple(out)


def bus_ids(nvml: NvmlLike | None) -> dict[str, int]:
    """GPU index by normalised PCI bus id (``kmsg.normalise_bus_id`` of NVML's
    ``pciInfo.busId``), to name the GPU of a kernel log XID."""
    from herdbook.agent.kmsg import normalise_bus_id
    if nvml is None:
        return {}
    backend: Any = nvml
    out = {}
    for i in range(backend.nvmlDeviceGetCount()):
        info = backend.nvmlDeviceGetPciInfo(backend.nvmlDeviceGetHandleByIndex(i))
        out[normalise_bus_id(_text(info.busId))] = i
    return out


def max_temperature(nvml: NvmlLike | None) -> float | None:
    if nvml is None:
        return None
    temps = [nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(i),
                                           NVML_TEMPERATURE_GPU)
             for i in range(nvml.nvmlDeviceGetCount())]
    return float(max(temps)) if temps else None
