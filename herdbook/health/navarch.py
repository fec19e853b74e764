"""What a CEL rule sees as ``event``: one health event of a report, in Navarch's shape
(``event_type``, ``gpu_index``, ``system``, ``metrics``, ``message``, ...) and in
herdbook's own (``kind``, ``gpu``, ``xid``, ``value``), so a policy in either format runs
unchanged. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from herdbook.events.health_report import CheckResult, GpuEvent, HealthEventKind

# DCGM health-watch systems (Navarch's ``SystemString``) of each event kind
SYSTEMS = {
    "xid": "DCGM_HEALTH_WATCH_DRIVER",
    "thermal": "DCGM_HEALTH_WATCH_THERMAL",
    "ecc_sbe": "DCGM_HEALTH_WATCH_MEM",
    "ecc_dbe": "DCGM_HEALTH_WATCH_MEM",
    "nvlink": "DCGM_HEALTH_WATCH_NVLINK",
    "pcie": "DCGM_HEALTH_WATCH_PCIE",
    "power": "DCGM_HEALTH_WATCH_POWER",
    "remap_pending": "DCGM_HEALTH_WATCH_MEM",
    "remap_failed": "DCGM_HEALTH_WATCH_MEM",
    "throttle": "DCGM_HEALTH_WATCH_POWER",
    "pcie_link": "DCGM_HEALTH_WATCH_PCIE",
    "nvlink_down": "DCGM_HEALTH_WATCH_NVLINK",
    "sxid": "DCGM_HEALTH_WATCH_NVSWITCH_NONFATAL",
    "gpu_count": "DCGM_HEALTH_WATCH_DRIVER",
}
UNKNOWN_SYSTEM = "DCGM_HEALTH_WATCH_UNKNOWN"


def _number(value: float) -> int | float:
    """Navarch reports temperatures and counts as ints; keep a fraction if there is one."""
    return int(value) if float(value).is_integer() else float(value)


def metrics(item: GpuEvent) -> dict[str, Any]:
    """``event.metrics``: Navarch's metric names for each kind of event."""
    count = _number(item.value)
    match item.kind:
        case "xid":
            return {"xid_code": item.xid}
        case "thermal":
            return {"temperature": count}
        case "ecc_sbe":
            return {"ecc_sbe_count": count, "ecc_dbe_count": 0}
        case "ecc_dbe":
            return {"ecc_sbe_count": 0, "ecc_dbe_count": count}
        case "nvlink":
            return {"link_id": 0, "error_count": count}
        case "pcie":
            return {"replay_count": count}
    return {"value": count}


def event_fields(item: GpuEvent, sent_at: float = 0.0) -> dict[str, Any]:
    """The ``event`` of a GPU health event, in both shapes."""
    timestamp = datetime.fromtimestamp(sent_at, UTC).isoformat().replace("+00:00", "Z")
    return {
        # Navarch
        "event_type": item.kind, "gpu_index": item.gpu, "gpu_uuid": "",
        "system": SYSTEMS.get(item.kind, UNKNOWN_SYSTEM), "metrics": metrics(item),
        "message": item.message or describe(item), "timestamp": timestamp,
        # herdbook
        "kind": item.kind, "gpu": item.gpu, "xid": item.xid, "value": float(item.value),
        "fatal": item.fatal,
    }


def check_fields(item: CheckResult) -> dict[str, Any]:
    """The ``event`` of a check result (herdbook's format classifies checks by rule)."""
    return {"kind": "check", "event_type": "check", "name": item.name, "status": item.status,
            "message": item.message, "gpu": -1, "gpu_index": -1, "metrics": {},
            "system": UNKNOWN_SYSTEM}


def describe(item: GpuEvent | CheckResult) -> str:
    if isinstance(item, CheckResult):
        return f"{item.name} check {item.status}" + (f" ({item.message})" if item.message else "")
    if item.kind == "sxid":
        what = f"{'fatal ' if item.fatal else ''}SXid {item.xid}"
        return what + (f" ({item.message})" if item.message else "")
    if item.kind in SAID and item.message:
        what = item.message     # the deeper checks say what they found in words
    else:
        what = {"xid": f"XID {item.xid}", "thermal": f"{item.value:g}°C"}.get(
            item.kind, f"{item.kind} {item.value:g}")
    return f"{what} on GPU {item.gpu}" if item.gpu >= 0 else what


SAID: frozenset[HealthEventKind] = frozenset({
    "remap_pending", "remap_failed", "throttle", "pcie_link", "nvlink_down", "ib_port_down",
    "ib_flap", "gpu_count"})
"""Kinds whose reason is the agent's message (``agent.deep_checks``): a number alone
would not say which link, port or reason."""
