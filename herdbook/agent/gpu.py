"""GPU inventory through NVML. ``FakeNvml`` has the same function names as pynvml, so
the agent code cannot tell them apart; it is what tests and ``--fake-gpus`` use."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from herdbook.events.node import GpuInfo

NVML_TEMPERATURE_GPU = 0


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

    def nvmlInit(self) -> None:
        pass

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

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> _FakeMemory:
        return _FakeMemory(total=handle.memory_total, free=handle.memory_total)

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        return handle.temperature_c


def real_nvml() -> NvmlLike | None:
    """pynvml if it is installed and a driver answers, else None (a CPU node)."""
    try:
        import pynvml  # type: ignore[import-not-found]
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


def max_temperature(nvml: NvmlLike | None) -> float | None:
    if nvml is None:
        return None
    temps = [nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(i),
                                           NVML_TEMPERATURE_GPU)
             for i in range(nvml.nvmlDeviceGetCount())]
    return float(max(temps)) if temps else None
