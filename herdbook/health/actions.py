"""What to do about a fault: the recommended action of every verdict, from one table keyed
by XID and by health-event kind. Pure.

The five actions, least to most disruptive:

- ``none``: nothing to do now (a corrected error; watch it);
- ``restart_workload``: the GPU is fine, the program that hit the fault is not: restart it;
- ``reset_gpu``: reset the GPU (``nvidia-smi -r`` with nothing running on it, or a reboot):
  pending row remaps and retired pages take effect, a stuck engine or link comes back;
- ``reboot_node``: reboot the node (``herd node reboot ID``): the GPU left the bus, the
  fabric or the driver is wedged;
- ``inspect_hardware``: a person must look (reseat, cable, cooling, RMA); replacing a VM
  does not fix it on bare metal, so auto-replace leaves it to the pool's provider
  (``reactors/pool_deciders.py``, ``replace_on_hardware_fault``).

XIDs follow NVIDIA's Xid catalogue (Ampere and later), its "Resolution Bucket (Immediate
Action)" column mapped onto these five: ``IGNORE`` -> none, ``RESTART_APP`` ->
restart_workload, ``RESET_GPU`` and the ECC/NVLink workflows -> reset_gpu, ``RESTART_BM``
-> reboot_node, ``CONTACT_SUPPORT``/``CHECK_MECHANICALS`` -> inspect_hardware. An XID the
table does not list gets ``inspect_hardware`` (the catalogue's default is to contact
support). A policy rule may name its own (``action:`` in the policy file), which wins.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, cast, get_args

if TYPE_CHECKING:   # a type only: this table stays free of imports
    from herdbook.events.health_report import HealthEventKind

Action = Literal["none", "restart_workload", "reset_gpu", "reboot_node", "inspect_hardware"]
ACTIONS: tuple[str, ...] = get_args(Action)
_RANK = {action: rank for rank, action in enumerate(ACTIONS)}

WORDS = {
    "none": "none",
    "restart_workload": "restart the workload",
    "reset_gpu": "reset the GPU",
    "reboot_node": "reboot the node",
    "inspect_hardware": "inspect the hardware",
}

XID_ACTIONS: dict[int, Action] = {
    8: "restart_workload",      # GPU stopped processing (idle timeout)
    13: "restart_workload",     # graphics engine exception: the program's fault
    31: "restart_workload",     # GPU memory page fault: the program's bad address
    43: "restart_workload",     # GPU stopped processing: the channel was reset
    45: "none",                 # preemptive cleanup after an earlier error
    48: "reset_gpu",            # double-bit ECC: reset to remap the row
    63: "reset_gpu",            # row remap / page retirement pending: a reset applies it
    64: "reset_gpu",            # remap or retirement recording failed
    74: "reset_gpu",            # NVLink error
    79: "reboot_node",          # fallen off the bus: only a reboot brings it back
    92: "none",                 # high single-bit ECC rate: corrected
    94: "restart_workload",     # contained ECC error: only the program that hit it
    95: "reset_gpu",            # uncontained ECC error
    119: "reset_gpu",           # GSP RPC timeout
    120: "reset_gpu",           # GSP error
    140: "reset_gpu",           # unrecovered ECC error
    154: "reset_gpu",           # recovery action changed (the driver says which)
}
UNLISTED_XID: Action = "inspect_hardware"

KIND_ACTIONS: dict[HealthEventKind, Action] = {
    "thermal": "inspect_hardware",      # cooling: fans, airflow, heat sink
    "ecc_sbe": "none",                  # corrected
    "ecc_dbe": "reset_gpu",             # the row is remapped at the next reset
    "nvlink": "none",                   # replayed (corrected) errors; a link down is nvlink_down
    "pcie": "none",                     # replays, corrected; a downtrained link is pcie_link
    "remap_pending": "reset_gpu",       # NVIDIA: a reset activates the pending remap
    "remap_failed": "inspect_hardware",  # a failed remap is an RMA criterion
    "throttle": "inspect_hardware",     # HW slowdown/thermal/power brake: cooling, power
    "pcie_link": "inspect_hardware",    # below its generation or width: reseat, riser
    "nvlink_down": "reset_gpu",         # a reset retrains the links; inspect if it stays
    "ib_port_down": "inspect_hardware",  # cable, transceiver, switch port
    "ib_flap": "inspect_hardware",
    "sxid": "none",                     # non-fatal NVSwitch error; fatal: SXID_FATAL
    "gpu_count": "inspect_hardware",    # a GPU the bus no longer enumerates
}
SXID_FATAL: Action = "reboot_node"
"""A fatal NVSwitch error: the fabric needs its GPUs and switches reset, in practice a
reboot (the fabric manager restarts with it)."""

CHECK_ACTIONS: dict[str, Action] = {
    "gpu": "reboot_node",               # NVML calls fail: the driver or a GPU is wedged
    "boot": "reboot_node",
    "health_events": "none",
    # The validation gate's check (docs/remediation.md#validation) failed: it runs after
    # the node's remediation (a reboot, a restart, an operator's clearing), once its boot
    # check passed, so what it finds is what a reboot did not fix and an idle check does
    # not see (a diagnostic under load, a collective's bandwidth): NVIDIA's answer to a
    # failed DCGM diagnostic is field diagnostics and support, a person's job. It also
    # keeps a bare-metal pool's auto-replace from looping on the same GPU.
    "validation": "inspect_hardware",
}
UNLISTED_CHECK: Action = "none"


def action_for(kind: str, xid: int = 0, *, name: str = "", fatal: bool = False) -> Action:
    """The table's action for one health event (``kind``, its ``xid``) or check result
    (``kind`` ``check``, its ``name``). ``fatal``: a fatal NVSwitch SXid."""
    if kind == "xid":
        return XID_ACTIONS.get(xid, UNLISTED_XID)
    if kind == "check":
        return CHECK_ACTIONS.get(name, UNLISTED_CHECK)
    if kind == "sxid" and fatal:
        return SXID_FATAL
    # typed keys, so a misspelt kind in the table fails mypy; any other word gets the default
    return KIND_ACTIONS.get(cast("HealthEventKind", kind), "inspect_hardware")


def worst(actions: Iterable[str]) -> Action:
    """The most disruptive of ``actions`` (``none`` if there are none): what to do about
    a verdict of several faults covers them all."""
    out: Action = "none"
    for action in actions:
        if _RANK.get(action, 0) > _RANK[out]:
            out = action  # type: ignore[assignment]  # ranked: one of ACTIONS
    return out


def hint(action: str, node_id: str) -> str:
    """One line for an operator: what to do, with the command where herdbook has one."""
    if action == "reboot_node":
        return f"recommended: reboot the node: herd node reboot {node_id}"
    return f"recommended: {WORDS.get(action, action)}"
