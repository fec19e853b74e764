"""pynvml's constants, the same numbers, so that a reader works on either backend (pynvml
or ``fake_nvml.FakeNvml``): sensors, ECC counter kinds, clocks, NVML's return codes and the
clock-throttle reason bits."""

from __future__ import annotations

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 8
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_MAX_LINKS = 18        # pynvml says 36 on newer headers; no GPU has more than 18
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded", NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}
"""NVML's text for each return code (pynvml's ``nvmlErrorString``)."""

# nvmlClocksThrottleReason* bits (pynvml), by the short name telemetry shows.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"), (0x100, "display_clock"), (0x200, "board_limit"),
    (0x400, "reliability"),
)
THROTTLE_GPU_IDLE = 0x1
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
