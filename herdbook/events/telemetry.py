"""Per-GPU telemetry: what each GPU measures, sampled by the agent every
``--telemetry-interval`` (DESIGN §10 "Telemetry is state, not decisions").

It never enters HERD_EVENTS: it is the latest value per node, on ``herd.gpu.<node_id>``
in HERD_HEARTBEATS (one message per subject, direct get), like the heartbeat and the
resource report. Health *changes* derived from readings still travel as health reports
and ``node.health_changed`` events.

A reading the library does not have on a GPU is absent (``None``, omitted on the wire),
never zero: a dashboard must not draw a 0 °C GPU. Names follow dcgm-exporter's fields
(``DCGM_FI_DEV_GPU_TEMP`` -> ``temperature_c``) so the metrics map one to one.

Both Structs are untracked by the garbage collector (``gc=False``: frozen, only
scalars, strings and tuples of them, so never in a reference cycle). A control plane
holds two samples per node (the latest and the console's ring): at 10,000 nodes 180k of
these, each walked field by field by every full collection, which took 330-370 ms and
stalled heartbeat ingest that long.
"""

from __future__ import annotations

import msgspec


class GpuReading(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One GPU, one sample. Identity first, then readings; every reading may be absent."""

    index: int
    uuid: str = ""
    serial: str | None = None
    pci_bus_id: str | None = None
    model: str | None = None                  # modelName
    driver_version: str | None = None
    temperature_c: float | None = None        # DCGM_FI_DEV_GPU_TEMP
    power_w: float | None = None              # DCGM_FI_DEV_POWER_USAGE
    power_limit_w: float | None = None        # DCGM_FI_DEV_POWER_MGMT_LIMIT
    gpu_util_pct: float | None = None         # DCGM_FI_DEV_GPU_UTIL
    mem_util_pct: float | None = None         # DCGM_FI_DEV_MEM_COPY_UTIL
    fb_used_mib: float | None = None          # DCGM_FI_DEV_FB_USED
    fb_total_mib: float | None = None         # DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE
    sm_clock_mhz: int | None = None           # DCGM_FI_DEV_SM_CLOCK
    mem_clock_mhz: int | None = None          # DCGM_FI_DEV_MEM_CLOCK
    throttle_reasons: int | None = None       # DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (bitmask)
    throttle_names: tuple[str, ...] | None = None
    """``throttle_reasons`` decoded (NVML's ``nvmlClocksThrottleReason*`` names, short)."""
    ecc_sbe_volatile: int | None = None       # DCGM_FI_DEV_ECC_SBE_VOL_TOTAL
    ecc_dbe_volatile: int | None = None       # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
    ecc_sbe_aggregate: int | None = None      # DCGM_FI_DEV_ECC_SBE_AGG_TOTAL
    ecc_dbe_aggregate: int | None = None      # DCGM_FI_DEV_ECC_DBE_AGG_TOTAL
    retired_pages_sbe: int | None = None      # DCGM_FI_DEV_RETIRED_SBE
    retired_pages_dbe: int | None = None      # DCGM_FI_DEV_RETIRED_DBE
    retired_pages_pending: bool | None = None  # DCGM_FI_DEV_RETIRED_PENDING
    remapped_rows_correctable: int | None = None    # DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS
    remapped_rows_uncorrectable: int | None = None  # DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None        # DCGM_FI_DEV_ROW_REMAP_FAILURE
    pcie_gen: int | None = None               # DCGM_FI_DEV_PCIE_LINK_GEN
    pcie_gen_max: int | None = None
    pcie_width: int | None = None             # DCGM_FI_DEV_PCIE_LINK_WIDTH
    pcie_width_max: int | None = None
    pcie_replay_count: int | None = None      # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
    nvlink_up: tuple[bool, ...] | None = None
    """Per NVLink link, in link order: whether it is up (absent: no NVLink)."""


class GpuTelemetry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                   gc=False):
    """One node's GPUs, sampled at ``sampled_at`` (the agent's clock: shown, never used
    for liveness). Published on ``herd.gpu.<node_id>``; the subject is the authority."""

    node_id: str
    boot_id: str
    sampled_at: float = 0.0
    hostname: str = ""                        # the Hostname label of dcgm-exporter's series
    gpus: tuple[GpuReading, ...] = ()
