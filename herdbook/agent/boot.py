"""The agent's one-time boot check and its conformance fingerprint."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

from herdbook.agent import gpu


def boot_check(nvml: gpu.NvmlLike | None, expected_gpus: int | None,
               state_dir: Path) -> dict[str, str]:
    """Every check by name: "ok", or what failed. A failed NVML call is itself a failure."""
    checks: dict[str, str] = {}
    count = 0
    if nvml is None:
        checks["nvml"] = "ok"
    else:
        try:
            count = int(nvml.nvmlDeviceGetCount())
            checks["nvml"] = "ok"
        except Exception as err:  # noqa: BLE001 - any NVML failure fails the check
            checks["nvml"] = f"NVML call failed: {err}"
    if expected_gpus is not None and checks["nvml"] == "ok":
        checks["gpu_count"] = ("ok" if count == expected_gpus
                               else f"found {count} GPUs, expected {expected_gpus}")
    probe = state_dir / ".boot-check"
    try:
        probe.write_text("ok")
        probe.unlink()
        checks["state_dir"] = "ok"
    except OSError as err:
        checks["state_dir"] = f"state dir not writable: {err.strerror}"
    return checks


def fingerprint(nvml: gpu.NvmlLike | None) -> str:
    """The conformance fingerprint: SHA-256 over the kernel version, the GPU driver
    version, the kernel command line, and BIOS/firmware versions where readable."""
    parts = [platform.release()]
    try:
        parts.append(gpu._text(nvml.nvmlSystemGetDriverVersion()) if nvml else "no-gpu")
    except Exception:  # noqa: BLE001
        parts.append("nvml-error")
    try:
        parts.append(Path("/proc/cmdline").read_text().strip())
    except OSError:
        parts.append(os.uname().version)
    for name in ("bios_vendor", "bios_version", "bios_date", "board_version"):
        try:
            parts.append(f"{name}={(DMI / name).read_text().strip()}")
        except OSError:
            pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


DMI = Path("/sys/class/dmi/id")
