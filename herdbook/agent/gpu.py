"""GPU inventory through NVML (pynvml, or the fake backend ``fake_nvml.FakeNvml`` with the
same function names): the backend a node has, its GPUs, their PCI bus ids and the hottest
temperature. pynvml's constants are in ``nvml_constants.py``."""

from __future__ import annotations

from typing import Any, Protocol

from herdbook.agent.nvml_constants import NVML_TEMPERATURE_GPU
from herdbook.events.node import GpuInfo


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
