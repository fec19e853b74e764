"""The agent's deeper node checks: pure rules over one GPU's telemetry reading
(``events.telemetry.GpuReading``, read by ``agent.telemetry``'s readers) and the node's GPU
count, each finding a health event of its own kind for the policy (``health.policy``):

- ``remap_failed`` / ``remap_pending``: NVML's row remapper says a remap failed (an RMA
  criterion) or waits for a GPU reset;
- ``throttle``: HW slowdown, HW thermal or HW power brake set at every check for at least
  the window (``ThrottleWatch``, which keeps the state, times passed in);
- ``pcie_link``: the link trained below its maximum width, or below its maximum
  generation while the GPU is busy (an idle GPU drops its generation to save power:
  that is not a fault);
- ``nvlink_down``: links NVML reports down, or fewer links than the GPU had when the agent
  started (a GPU that answers for no link at all is lost or has none: nothing here);
- ``gpu_count``: fewer GPUs than the node's expected count.

A field NVML does not answer (``None``) finds nothing: a GPU without row remapping (pre
Ampere) or NVLink (a PCIe card) is not at fault for lacking it. Conditions, not
occurrences: each is reported on every report while it lasts, so its clearing is news.
"""

from __future__ import annotations

from herdbook.agent import nvml_constants
from herdbook.events.health_report import GpuEvent
from herdbook.events.telemetry import GpuReading

THROTTLE_HW = {0x8: "hw_slowdown", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
"""The throttle reasons that are the hardware's (NVML's clocksThrottleReasonHw*): the
software's (power cap, sw thermal, idle) are the driver doing its job."""
THROTTLE_WINDOW = 300.0
"""How long a HW throttle reason must hold, seen at every check, to be a fault: 5 checks
at the default --health-interval, longer than a load spike's power brake."""


def remap_events(r: GpuReading) -> list[GpuEvent]:
    if r.remapped_rows_failed:
        return [GpuEvent(kind="remap_failed", gpu=r.index, value=1.0,
                         message="row remapping failed")]
    if r.remapped_rows_pending:
        rows = r.remapped_rows_uncorrectable or 0
        return [GpuEvent(kind="remap_pending", gpu=r.index, value=float(rows),
                         message=f"row remap pending ({rows} uncorrectable), reset to apply")]
    return []


def pcie_link_events(r: GpuReading) -> list[GpuEvent]:
    found = []
    if r.pcie_width is not None and r.pcie_width_max and r.pcie_width < r.pcie_width_max:
        found.append(f"x{r.pcie_width} of x{r.pcie_width_max}")
    idle = r.throttle_reasons is not None and bool(r.throttle_reasons & nvml_constants.THROTTLE_GPU_IDLE)
    if (r.pcie_gen is not None and r.pcie_gen_max and r.pcie_gen < r.pcie_gen_max
            and not idle and r.throttle_reasons is not None):
        found.append(f"gen {r.pcie_gen} of {r.pcie_gen_max}")
    if not found:
        return []
    return [GpuEvent(kind="pcie_link", gpu=r.index, value=float(r.pcie_width or 0),
                     message=f"PCIe link at {', '.join(found)}")]


def nvlink_events(r: GpuReading, links_at_start: int | None = None) -> list[GpuEvent]:
    """Links down, or fewer links than at the agent's start (``links_at_start``)."""
    if r.nvlink_up is None:
        return []   # NVML answers no link: a PCIe card, or a GPU that is lost (its XID says)
    links = len(r.nvlink_up)
    total = max(links, links_at_start or 0)
    down = [i for i, up in enumerate(r.nvlink_up) if not up]
    missing = total - links
    if not down and not missing:
        return []
    up = links - len(down)
    named = f"link{'s' if len(down) > 1 else ''} {','.join(map(str, down))} down" if down else ""
    fewer = f"{missing} link{'s' if missing > 1 else ''} gone" if missing else ""
    what = "; ".join(part for part in (named, fewer) if part)
    return [GpuEvent(kind="nvlink_down", gpu=r.index, value=float(total - up),
                     message=f"NVLink {what} ({up} of {total} up)")]


def gpu_count_events(found: int, expected: int | None) -> list[GpuEvent]:
    if expected is None or found >= expected:
        return []
    return [GpuEvent(kind="gpu_count", value=float(found),
                     message=f"found {found} GPUs, expected {expected}")]


def throttle_names(reasons: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_HW.items() if reasons & bit)


class ThrottleWatch:
    """Per GPU, since when its HW throttle reasons have been set at every check. A check
    that finds none (or cannot read them) starts it again."""

    def __init__(self, window: float = THROTTLE_WINDOW) -> None:
        self.window = window
        self._since: dict[int, float] = {}

    def observe(self, index: int, reasons: int | None, now: float) -> list[GpuEvent]:
        names = throttle_names(reasons or 0)
        if not names:
            self._since.pop(index, None)
            return []
        since = self._since.setdefault(index, now)
        lasted = now - since
        if lasted < self.window:
            return []
        return [GpuEvent(kind="throttle", gpu=index, value=round(lasted, 1),
                         message=f"clocks throttled by {', '.join(names)} for {lasted:.0f}s")]
