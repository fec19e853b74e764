"""One telemetry sample of every GPU through NVML (``events.telemetry``), read by small
per-field readers.

Each reader asks NVML for one thing and turns pynvml's ``NVMLError`` (NOT_SUPPORTED on a
GPU without the feature, FUNCTION_NOT_FOUND on an older driver, GPU_IS_LOST, ...) into
``None``: the reading is absent, never zero, and one missing field never costs the others.
The backend's own error class is caught (``nvml.NVMLError``: pynvml's module attribute,
``FakeNvml.NVMLError`` for the fake), so the sampler cannot tell the two apart; anything
else (a bug) propagates and the agent's loop logs it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

from herdbook.agent import gpu, nvml_constants
from herdbook.events.telemetry import GpuReading, GpuTelemetry

T = TypeVar("T")
MIB = 1024 * 1024


def nvml_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """What a failed call of this backend raises: its ``NVMLError``, and AttributeError
    for a function an older pynvml does not wrap at all."""
    error = getattr(nvml, "NVMLError", None)
    if isinstance(error, type) and issubclass(error, BaseException):
        return (error, AttributeError)
    return (AttributeError,)


class Reader:
    """Calls into one backend, each failed one absent."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.errors = nvml_errors(nvml)

    def get(self, function: str, *args: Any, then: Callable[[Any], T] = lambda v: v) -> T | None:
        """``then(nvml.<function>(*args))``, or None where NVML has no answer."""
        try:
            return then(getattr(self.nvml, function)(*args))
        except self.errors:
            return None


def _text(value: Any) -> str:
    return gpu._text(value)


def _watts(milliwatts: Any) -> float:
    return round(int(milliwatts) / 1000, 3)


def _mib(value: Any) -> float:
    return round(int(value) / MIB, 1)


def throttle_names(reasons: int) -> tuple[str, ...]:
    """The names of the set bits of NVML's clock-throttle bitmask, in bit order."""
    return tuple(name for bit, name in nvml_constants.THROTTLE_REASONS if reasons & bit)


def _identity(r: Reader, handle: Any) -> dict[str, Any]:
    return {"uuid": r.get("nvmlDeviceGetUUID", handle, then=_text) or "",
            "serial": r.get("nvmlDeviceGetSerial", handle, then=_text),
            "pci_bus_id": r.get("nvmlDeviceGetPciInfo", handle, then=lambda i: _text(i.busId)),
            "model": r.get("nvmlDeviceGetName", handle, then=_text)}


def _thermal_and_power(r: Reader, handle: Any) -> dict[str, Any]:
    return {"temperature_c": r.get("nvmlDeviceGetTemperature", handle,
                                   nvml_constants.NVML_TEMPERATURE_GPU, then=float),
            "power_w": r.get("nvmlDeviceGetPowerUsage", handle, then=_watts),
            # the limit in force (DCGM_FI_DEV_POWER_MGMT_LIMIT), not the board's maximum
            "power_limit_w": r.get("nvmlDeviceGetPowerManagementLimit", handle, then=_watts)}


def _utilisation_and_memory(r: Reader, handle: Any) -> dict[str, Any]:
    util = r.get("nvmlDeviceGetUtilizationRates", handle)
    memory = r.get("nvmlDeviceGetMemoryInfo", handle)
    return {"gpu_util_pct": None if util is None else float(util.gpu),
            "mem_util_pct": None if util is None else float(util.memory),
            "fb_used_mib": None if memory is None else _mib(memory.used),
            "fb_total_mib": None if memory is None else _mib(memory.total)}


def _clocks(r: Reader, handle: Any) -> dict[str, Any]:
    # Newer drivers call them "clock event reasons"; pynvml keeps the old name as well.
    reasons = r.get("nvmlDeviceGetCurrentClocksThrottleReasons", handle, then=int)
    if reasons is None:
        reasons = r.get("nvmlDeviceGetCurrentClocksEventReasons", handle, then=int)
    return {"sm_clock_mhz": r.get("nvmlDeviceGetClockInfo", handle, nvml_constants.NVML_CLOCK_SM, then=int),
            "mem_clock_mhz": r.get("nvmlDeviceGetClockInfo", handle, nvml_constants.NVML_CLOCK_MEM,
                                   then=int),
            "throttle_reasons": reasons,
            "throttle_names": None if reasons is None else throttle_names(reasons)}


def _ecc(r: Reader, handle: Any) -> dict[str, Any]:
    def total(error_type: int, counter_type: int) -> int | None:
        return r.get("nvmlDeviceGetTotalEccErrors", handle, error_type, counter_type, then=int)

    corrected, uncorrected = (nvml_constants.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                              nvml_constants.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    return {"ecc_sbe_volatile": total(corrected, nvml_constants.NVML_VOLATILE_ECC),
            "ecc_dbe_volatile": total(uncorrected, nvml_constants.NVML_VOLATILE_ECC),
            "ecc_sbe_aggregate": total(corrected, nvml_constants.NVML_AGGREGATE_ECC),
            "ecc_dbe_aggregate": total(uncorrected, nvml_constants.NVML_AGGREGATE_ECC)}


def _retired_and_remapped(r: Reader, handle: Any) -> dict[str, Any]:
    # Page retirement is pre-Ampere, row remapping Ampere and later: each GPU answers one.
    rows = r.get("nvmlDeviceGetRemappedRows", handle)
    return {"retired_pages_sbe": r.get(
                "nvmlDeviceGetRetiredPages", handle,
                nvml_constants.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, then=len),
            "retired_pages_dbe": r.get(
                "nvmlDeviceGetRetiredPages", handle,
                nvml_constants.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, then=len),
            "retired_pages_pending": r.get(
                "nvmlDeviceGetRetiredPagesPendingStatus", handle,
                then=lambda v: int(v) == nvml_constants.NVML_FEATURE_ENABLED),
            "remapped_rows_correctable": None if rows is None else int(rows[0]),
            "remapped_rows_uncorrectable": None if rows is None else int(rows[1]),
            "remapped_rows_pending": None if rows is None else bool(rows[2]),
            "remapped_rows_failed": None if rows is None else bool(rows[3])}


def _pcie(r: Reader, handle: Any) -> dict[str, Any]:
    return {"pcie_gen": r.get("nvmlDeviceGetCurrPcieLinkGeneration", handle, then=int),
            "pcie_gen_max": r.get("nvmlDeviceGetMaxPcieLinkGeneration", handle, then=int),
            "pcie_width": r.get("nvmlDeviceGetCurrPcieLinkWidth", handle, then=int),
            "pcie_width_max": r.get("nvmlDeviceGetMaxPcieLinkWidth", handle, then=int),
            "pcie_replay_count": r.get("nvmlDeviceGetPcieReplayCounter", handle, then=int)}


def nvlink_states(r: Reader, handle: Any) -> tuple[bool, ...] | None:
    """Up or down per link, in link order, up to the first link NVML does not know (the
    GPU's last); None when it knows not even link 0 (a PCIe card: no NVLink)."""
    links: list[bool] = []
    for link in range(nvml_constants.NVML_NVLINK_MAX_LINKS):
        state = r.get("nvmlDeviceGetNvLinkState", handle, link,
                      then=lambda v: int(v) == nvml_constants.NVML_FEATURE_ENABLED)
        if state is None:
            break
        links.append(state)
    return tuple(links) or None


READERS: tuple[Callable[[Reader, Any], dict[str, Any]], ...] = (
    _identity, _thermal_and_power, _utilisation_and_memory, _clocks, _ecc,
    _retired_and_remapped, _pcie)


def read_gpu(r: Reader, index: int, driver_version: str | None) -> GpuReading:
    """GPU ``index``, every field NVML answers; just its index if it has no handle."""
    handle = r.get("nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return GpuReading(index=index, driver_version=driver_version)
    fields: dict[str, Any] = {}
    for reader in READERS:
        fields.update(reader(r, handle))
    return GpuReading(index=index, driver_version=driver_version,
                      nvlink_up=nvlink_states(r, handle), **fields)


def sample(nvml: gpu.NvmlLike, node_id: str, boot_id: str, now: float,
           hostname: str | None = None) -> GpuTelemetry:
    """Every GPU of ``nvml``, read now. ``now`` is the agent's clock (``sampled_at``,
    shown only); ``hostname`` is the dcgm-exporter ``Hostname`` label (default: this
    host's name). No GPU at all when NVML cannot count them."""
    r = Reader(nvml)
    driver = r.get("nvmlSystemGetDriverVersion", then=_text)
    count = r.get("nvmlDeviceGetCount", then=int) or 0
    return GpuTelemetry(node_id=node_id, boot_id=boot_id, sampled_at=now,
                        hostname=socket.gethostname() if hostname is None else hostname,
                        gpus=tuple(read_gpu(r, i, driver) for i in range(count)))
