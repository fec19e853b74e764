"""The deeper node checks (issue 29 item 3): each fault, injected into the fake backend, a
fake sysfs tree or a fake kernel log, becomes a health event of its own kind in the
agent's report, and the default policy gives it the verdict docs/health.md's check table
says, with its recommended action. Pure, with an injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from herdbook.agent import fake_nvml, gpu, nvml_constants
from herdbook.agent.deep_checks import ThrottleWatch, pcie_link_events
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.agent.infiniband import IbWatch, read_ports
from herdbook.agent.kmsg import KernelLog, XidMerger, parse_sxid
from herdbook.events.health_report import GpuEvent, HealthReport
from herdbook.events.telemetry import GpuReading
from herdbook.health.policy import Policy
from tests.fakes import FakeClock

POLICY = Policy.load(None)


def kinds(report: HealthReport) -> list[tuple[str, int]]:
    return sorted((e.kind, e.gpu) for e in report.events)


def verdict_of(*events: GpuEvent) -> tuple[str, str, tuple[str, ...]]:
    report = HealthReport(report_id="r", node_id="n", boot_id="b", events=events)
    verdict = POLICY.classify(report)
    return verdict.result, verdict.action, verdict.reasons


def monitor(count: int = 4, **kwargs: object) -> tuple[fake_nvml.FakeNvml, HealthMonitor, FakeClock]:
    nvml = fake_nvml.FakeNvml(count=count, seed="n")
    clock = FakeClock()
    return nvml, HealthMonitor(nvml, clock=clock, **kwargs), clock  # type: ignore[arg-type]


def test_a_healthy_fake_node_finds_nothing() -> None:
    _, mon, _ = monitor(expected_gpus=4)
    report = mon.report("n", "b", 0.0)
    assert report.events == ()
    assert POLICY.classify(report).action == "none"


def test_row_remaps_pending_and_failed() -> None:
    nvml, mon, _ = monitor()
    nvml.inject("ecc-dbe", 1, 1)        # an uncorrectable error: a remap pending
    report = mon.report("n", "b", 0.0)
    pending = next(e for e in report.events if e.kind == "remap_pending")
    assert pending.gpu == 1 and "reset to apply" in pending.message
    assert verdict_of(pending)[:2] == ("degraded", "reset_gpu")
    nvml.inject("remap-failed", 2)
    report = mon.report("n", "b", 0.0)
    assert ("remap_failed", 2) in kinds(report)
    failed = next(e for e in report.events if e.kind == "remap_failed")
    assert verdict_of(failed) == ("critical", "inspect_hardware",
                                  ("remap-failed: row remapping failed on GPU 2",))
    # a condition: reported again on the next report while it lasts
    assert ("remap_failed", 2) in kinds(mon.report("n", "b", 0.0))


def test_throttling_counts_only_when_sustained_over_the_window() -> None:
    nvml, mon, clock = monitor(throttle_window=300.0)
    nvml.inject("throttle", 0, 0x80)        # HW power brake
    assert ("throttle", 0) not in kinds(mon.report("n", "b", 0.0))
    clock.advance(299)
    assert ("throttle", 0) not in kinds(mon.report("n", "b", 0.0))
    clock.advance(1)
    event = next(e for e in mon.report("n", "b", 0.0).events if e.kind == "throttle")
    assert event.message == "clocks throttled by hw_power_brake for 300s"
    assert verdict_of(event)[:2] == ("degraded", "inspect_hardware")
    # a check without it starts the window again
    nvml.inject("clear")
    assert mon.report("n", "b", 0.0).events == ()
    nvml.inject("throttle", 0, 0x8)
    clock.advance(200)
    assert ("throttle", 0) not in kinds(mon.report("n", "b", 0.0))


def test_software_throttling_is_not_a_fault() -> None:
    watch = ThrottleWatch(10.0)
    sw = 0x1 | 0x4 | 0x20                   # idle, sw power cap, sw thermal
    assert watch.observe(0, sw, 0.0) == [] and watch.observe(0, sw, 100.0) == []
    assert watch.observe(0, None, 200.0) == []   # unreadable: nothing


def test_pcie_link_below_its_width_or_busy_below_its_generation() -> None:
    nvml, mon, _ = monitor()
    nvml.inject("pcie", 3, 150)             # replays train the link down to x8
    event = next(e for e in mon.report("n", "b", 0.0).events if e.kind == "pcie_link")
    assert (event.gpu, event.message) == (3, "PCIe link at x8 of x16")
    assert verdict_of(event)[:2] == ("degraded", "inspect_hardware")
    busy = GpuReading(index=0, pcie_gen=3, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
                      throttle_reasons=0)
    idle = GpuReading(index=0, pcie_gen=1, pcie_gen_max=5, pcie_width=16, pcie_width_max=16,
                      throttle_reasons=nvml_constants.THROTTLE_GPU_IDLE)
    assert [e.message for e in pcie_link_events(busy)] == ["PCIe link at gen 3 of 5"]
    assert pcie_link_events(idle) == []     # an idle GPU saves power at gen 1


def test_nvlink_links_down() -> None:
    nvml, mon, _ = monitor()
    nvml.inject("nvlink-down", 2, 5)
    nvml.inject("nvlink-down", 2, 7)
    event = next(e for e in mon.report("n", "b", 0.0).events if e.kind == "nvlink_down")
    assert (event.gpu, event.value) == (2, 2.0)
    assert event.message == "NVLink links 5,7 down (16 of 18 up)"
    assert verdict_of(event)[:2] == ("unhealthy", "reset_gpu")
    # NVLink errors alone (a corrected burst) leave the links up
    nvml.inject("clear")
    nvml.inject("nvlink", 1, 4)
    assert kinds(mon.report("n", "b", 0.0)) == [("nvlink", 1)]


def test_fewer_nvlinks_than_at_start() -> None:
    nvml, mon, _ = monitor()
    nvml.gpus[0].nvlinks = [True] * 12      # six links no longer answer
    event = next(e for e in mon.report("n", "b", 0.0).events if e.kind == "nvlink_down")
    assert event.message == "NVLink 6 links gone (12 of 18 up)"


def test_a_pcie_card_without_nvlink_or_remapping_finds_nothing() -> None:
    nvml, mon, _ = monitor(count=1)
    nvml.gpus[0].unsupported = {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetRemappedRows"}
    mon = HealthMonitor(nvml, clock=FakeClock())
    assert mon.report("n", "b", 0.0).events == ()


def test_fewer_gpus_than_expected() -> None:
    nvml, mon, _ = monitor(count=8, expected_gpus=8)
    nvml.inject("gpu-missing", 0, 1)
    event = next(e for e in mon.report("n", "b", 0.0).events if e.kind == "gpu_count")
    assert (event.gpu, event.message) == (-1, "found 7 GPUs, expected 8")
    assert verdict_of(event) == ("critical", "inspect_hardware",
                                 ("gpu-missing: found 7 GPUs, expected 8",))
    _, unset, _ = monitor(count=8)          # no expected count: not checked
    assert unset.report("n", "b", 0.0).events == ()


# InfiniBand, from a fake sysfs tree -------------------------------------------------------


def ib_port(root: Path, device: str, port: int, state: str, downed: int = 0,
            phys: str = "5: LinkUp") -> None:
    base = root / device / "ports" / str(port)
    (base / "counters").mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(state + "\n")
    (base / "phys_state").write_text(phys + "\n")
    (base / "counters" / "link_downed").write_text(f"{downed}\n")


def test_infiniband_ports_are_read_from_sysfs(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", 3)
    ib_port(tmp_path, "mlx5_1", 1, "1: DOWN", phys="3: Disabled")
    ports = read_ports(tmp_path)
    assert ports["mlx5_0 port 1"].state == "ACTIVE"
    assert ports["mlx5_0 port 1"].link_downed == 3
    assert (ports["mlx5_1 port 1"].state, ports["mlx5_1 port 1"].phys_state) == (
        "DOWN", "Disabled")


def test_an_infiniband_port_down_or_flapping(tmp_path: Path) -> None:
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE")
    ib_port(tmp_path, "mlx5_1", 1, "1: DOWN", phys="2: Polling")   # never cabled: not watched
    nvml, mon, _ = monitor(infiniband=IbWatch(tmp_path))
    assert mon.report("n", "b", 0.0).events == ()
    ib_port(tmp_path, "mlx5_0", 1, "4: ACTIVE", downed=2)           # went down, came back
    [flap] = mon.report("n", "b", 0.0).events
    assert (flap.kind, flap.message) == ("ib_flap", "InfiniBand mlx5_0 port 1 link went "
                                                    "down 2 times")
    assert verdict_of(flap)[:2] == ("degraded", "inspect_hardware")
    ib_port(tmp_path, "mlx5_0", 1, "1: DOWN", downed=2, phys="2: Polling")
    [down] = mon.report("n", "b", 0.0).events
    assert (down.kind, down.gpu, down.message) == ("ib_port_down", -1,
                                                   "InfiniBand mlx5_0 port 1 DOWN, Polling")
    assert verdict_of(down)[:2] == ("unhealthy", "inspect_hardware")


def test_no_infiniband_tree_turns_the_check_off(tmp_path: Path) -> None:
    assert not IbWatch(tmp_path / "absent").present
    assert IbWatch(tmp_path / "absent").check() == []


# NVSwitch SXids, from the kernel log ------------------------------------------------------


class ListSource:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def read_lines(self) -> list[str]:
        out, self.lines = self.lines, []
        return out

    def close(self) -> None:
        pass


FATAL = ("nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 24007, Fatal, Link 44 sourcetrack "
         "TCEN0 crumbstore ECC DBE Error")
NONFATAL = ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 46 egress "
            "non-posted PRIV error (First)")


@pytest.mark.parametrize("prefix", ["", "6,1234,5678901,-;", "[12345.678901] ",
                                    "Nov 23 10:00:00 host kernel: "])
def test_sxid_lines_parse_behind_every_prefix(prefix: str) -> None:
    fatal = parse_sxid(prefix + FATAL)
    assert fatal is not None and (fatal.switch, fatal.sxid, fatal.fatal) == (
        "nvidia-nvswitch2", 24007, True)
    assert fatal.message == "Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error"
    other = parse_sxid(prefix + NONFATAL)
    assert other is not None and (other.sxid, other.fatal) == (12028, False)


@pytest.mark.parametrize("line", [
    "nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 24007, Severity 1 Engine instance 44",
    "nvidia-nvswitch2: SXid (PCI:0000:87:00.0): 24007, Data {0x00000000, 0x00000000}",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus",
    "an SXid mentioned in passing"])
def test_follow_up_and_other_lines_are_not_sxids(line: str) -> None:
    assert parse_sxid(line) is None


def test_sxids_of_the_kernel_log_are_node_events_fatal_or_not() -> None:
    nvml, mon, _ = monitor()
    source = ListSource()
    mon.kernel_log = kernel = KernelLog(source, lambda: gpu.bus_ids(nvml), XidMerger(clock=FakeClock()))
    source.lines = [FATAL, FATAL.replace("Fatal, Link 44 sourcetrack", "Severity 1 Engine"),
                    NONFATAL]
    assert len(kernel.poll()) == 2          # at once: the agent reports without waiting
    report = mon.report("n", "b", 0.0)
    sxids = [e for e in report.events if e.kind == "sxid"]
    assert [(e.xid, e.fatal, e.gpu) for e in sxids] == [(24007, True, -1), (12028, False, -1)]
    result, action, reasons = verdict_of(sxids[0])
    assert (result, action) == ("critical", "reboot_node")
    assert reasons == ("nvswitch-fatal: fatal SXid 24007 (nvidia-nvswitch2: Link 44 "
                       "sourcetrack TCEN0 crumbstore ECC DBE Error)",)
    assert verdict_of(sxids[1])[:2] == ("degraded", "none")
    assert [e for e in mon.report("n", "b", 0.0).events if e.kind == "sxid"] == []
