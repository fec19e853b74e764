"""XIDs from the kernel log (issue 19 item 1): the parser on a corpus of lines in the
driver's documented formats (old and current, with and without pid/name, behind
/dev/kmsg, dmesg and journal prefixes), bus-id normalisation against NVML's form, the
sources (file, FIFO, a journalctl-like subprocess), and the NVML/kernel de-duplication."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from herdbook.agent import fake_nvml, gpu
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.agent.kmsg import (
    FileSource,
    KernelLog,
    KernelXid,
    XidMerger,
    check_source,
    normalise_bus_id,
    open_source,
    parse_line,
)
from herdbook.events.health_report import GpuEvent
from tests.fakes import FakeClock

FALLEN = "GPU has fallen off the bus."
CORPUS = [
    # the current format, a pid and a process name
    (f"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, {FALLEN}",
     KernelXid("0000:3b:00", 79, FALLEN, 1234, "python3")),
    # no process known
    (f"NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, {FALLEN}",
     KernelXid("0000:3b:00", 79, FALLEN, None, "")),
    # no pid/name at all
    ("NVRM: Xid (PCI:0000:65:00): 48, An uncorrectable double bit error (DBE) has been "
     "detected on GPU in the framebuffer at partition 6, subpartition 0.",
     KernelXid("0000:65:00", 48, "An uncorrectable double bit error (DBE) has been detected "
               "on GPU in the framebuffer at partition 6, subpartition 0.")),
    # the older form, without "PCI:"
    ("NVRM: Xid (0000:3b:00): 13, Graphics Exception: ESR 0x405840=0x0",
     KernelXid("0000:3b:00", 13, "Graphics Exception: ESR 0x405840=0x0")),
    # a pid but no name
    ("NVRM: Xid (PCI:0000:b1:00): 94, pid=91011, Ch 00000008, errorString CTX SWITCH TIMEOUT, "
     "Info 0x3c041",
     KernelXid("0000:b1:00", 94, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x3c041",
               91011)),
    # upper-case hex, a function, an 8-hex domain
    ("NVRM: Xid (PCI:00000000:B1:00.0): 31, pid=7, name=train, Ch 0000002e, intr 10000000. "
     "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f_12340000.",
     KernelXid("0000:b1:00", 31, "Ch 0000002e, intr 10000000. MMU Fault: ENGINE GRAPHICS "
               "GPCCLIENT_T1_0 faulted @ 0x7f_12340000.", 7, "train")),
    # 4-part domain:bus:device.function
    ("NVRM: Xid (0000:3b:00.0): 43, pid=2, name=a.out, Ch 00000010",
     KernelXid("0000:3b:00", 43, "Ch 00000010", 2, "a.out")),
]
PREFIXES = [
    "",
    "6,1234,5678901234,-;",                          # a /dev/kmsg record
    "4,99,12345678,c;",
    "[12345.678901] ",                               # dmesg
    "[    5.000001] ",
    "Nov 23 10:00:00 gpu-host-17 kernel: ",          # journal, short
    "[ 4321.123456] gpu-host-17 kernel: ",            # journal, short-monotonic
    "2026-11-23T10:00:00.123456+00:00 gpu-host-17 kernel: ",
]


@pytest.mark.parametrize("prefix", PREFIXES, ids=[p.strip() or "bare" for p in PREFIXES])
@pytest.mark.parametrize(("line", "expected"), CORPUS, ids=[f"corpus-{i}" for i in range(len(CORPUS))])
def test_every_format_parses_behind_every_prefix(prefix: str, line: str,
                                                 expected: KernelXid) -> None:
    assert parse_line(prefix + line + "\n") == expected


@pytest.mark.parametrize("line", [
    "",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
    "NVRM: GPU at PCI:0000:3b:00: GPU-1b2c3d4e-0000-0000-0000-000000000000",
    "NVRM: Xid (PCI:0000:3b:00): seventy-nine, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:zzzz:3b:00): 79, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:40): 79, device 0x40 is no PCI device number",
    " SUBSYSTEM=pci",                                 # a kmsg continuation line
    "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
])
def test_other_lines_are_not_xids(line: str) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize(("text", "normal"), [
    ("00000000:3B:00.0", "0000:3b:00"),      # NVML pciInfo.busId
    ("0000:3B:00.0", "0000:3b:00"),          # NVML busIdLegacy
    ("0000:3b:00", "0000:3b:00"),            # the kernel line
    ("PCI:0000:3b:00", "0000:3b:00"),
    ("3b:00.0", "0000:3b:00"),               # no domain
    ("00000001:DB:1F.7", "0001:db:1f"),
])
def test_bus_ids_normalise_to_one_form(text: str, normal: str) -> None:
    assert normalise_bus_id(text) == normal


def test_a_bad_bus_id_is_a_value_error() -> None:
    for text in ("", "3b", "0000:3b:zz", "0000:300:00.0"):
        with pytest.raises(ValueError):
            normalise_bus_id(text)


def test_the_fake_backend_maps_bus_ids_to_gpu_indexes() -> None:
    nvml = fake_nvml.FakeNvml(count=4, seed="n")
    ids = gpu.bus_ids(nvml)
    assert ids == {normalise_bus_id(fake_nvml.fake_bus_id(i)): i for i in range(4)}
    assert len(set(ids)) == 4
    assert gpu.bus_ids(None) == {}


class ListSource:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.closed = False

    def read_lines(self) -> list[str]:
        out, self.lines = self.lines, []
        return out

    def close(self) -> None:
        self.closed = True


def kernel_line(index: int, xid: int) -> str:
    bus = normalise_bus_id(fake_nvml.fake_bus_id(index))
    return f"6,{index},{xid},-;NVRM: Xid (PCI:{bus}): {xid}, pid=1, name=x, something"


def test_a_kernel_xid_names_the_gpu_by_its_bus_id() -> None:
    source = ListSource()
    log = KernelLog(source, lambda: gpu.bus_ids(fake_nvml.FakeNvml(count=8, seed="n")),
                    XidMerger(clock=FakeClock()))
    source.lines = [kernel_line(5, 79), "unrelated",
                    "NVRM: Xid (PCI:0000:ee:00): 13, not one of ours"]
    found = log.poll()
    assert [(e.gpu, e.xid, e.source) for e in found] == [(5, 79, "kmsg"), (-1, 13, "kmsg")]
    assert log.lines == 3
    assert log.drain() == found and log.drain() == []


def test_an_xid_seen_by_nvml_and_the_kernel_in_one_report_is_reported_once() -> None:
    nvml = fake_nvml.FakeNvml(count=2, seed="n")
    monitor = HealthMonitor(nvml, clock=FakeClock())
    source = ListSource()
    monitor.kernel_log = kernel = KernelLog(source, lambda: gpu.bus_ids(nvml), XidMerger(clock=FakeClock()))
    nvml.inject("xid", 1, 31)
    source.lines = [kernel_line(1, 31)]
    kernel.poll()
    report = monitor.report("n", "b", 0.0)
    xids = [e for e in report.events if e.kind == "xid"]
    assert [(e.gpu, e.xid, e.source) for e in xids] == [(1, 31, "nvml+kmsg")]
    assert xids[0].message == "something (pid 1, x)"


def test_the_same_xid_of_the_other_source_within_the_window_is_a_duplicate() -> None:
    clock = FakeClock()
    merger = XidMerger(window=30.0, clock=clock)
    nvml = GpuEvent(kind="xid", gpu=0, xid=31)
    kmsg = GpuEvent(kind="xid", gpu=0, xid=31, source="kmsg")
    assert [e.source for e in merger.merge([nvml], [])] == ["nvml"]
    clock.advance(10)
    assert merger.merge([], [kmsg]) == []               # told in the report before
    assert merger.duplicates == 1
    clock.advance(10)
    assert [e.source for e in merger.merge([], [kmsg])] == ["kmsg"]   # a new one
    clock.advance(31)
    assert [e.source for e in merger.merge([nvml], [])] == ["nvml"]   # past the window


def test_repeats_from_both_sources_count_once_each() -> None:
    merger = XidMerger(clock=FakeClock())
    nvml = [GpuEvent(kind="xid", gpu=2, xid=31)] * 3
    kmsg = [GpuEvent(kind="xid", gpu=2, xid=31, source="kmsg")] * 3
    out = merger.merge(nvml, kmsg)
    assert [e.source for e in out] == ["nvml+kmsg"] * 3
    other_gpu = merger.merge([], [GpuEvent(kind="xid", gpu=3, xid=31, source="kmsg")])
    assert len(other_gpu) == 1


def test_a_regular_file_is_followed_from_its_end(tmp_path: Path) -> None:
    path = tmp_path / "kern.log"
    path.write_text("NVRM: Xid (PCI:0000:3b:00): 79, an old boot's line\n")
    source = FileSource(str(path))
    try:
        assert source.read_lines() == []
        with path.open("a") as f:
            f.write("[1.0] NVRM: Xid (PCI:0000:3b:00): 13, half")
        assert source.read_lines() == []                 # not a whole line yet
        with path.open("a") as f:
            f.write(" a line\nsecond\n")
        assert source.read_lines() == ["[1.0] NVRM: Xid (PCI:0000:3b:00): 13, half a line",
                                       "second"]
    finally:
        source.close()


def test_a_fifo_is_read_as_writers_come_and_go(tmp_path: Path) -> None:
    path = tmp_path / "kmsg.fifo"
    os.mkfifo(path)
    source = FileSource(str(path))
    try:
        assert source.read_lines() == []                 # no writer yet: no block
        for n in range(2):
            with path.open("w") as writer:
                writer.write(f"line {n}\n")
            assert source.read_lines() == [f"line {n}"]
    finally:
        source.close()


def test_the_source_flag_is_checked() -> None:
    for spec in ("/dev/kmsg", "off", "journalctl", "file:/var/log/kern.log"):
        assert check_source(spec) == spec
    for spec in ("file:", "kmsg", "syslog"):
        with pytest.raises(ValueError, match="--kmsg-source"):
            check_source(spec)


def test_a_source_that_cannot_be_opened_is_one_warning_and_no_monitor(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert open_source(f"file:{tmp_path}/missing") is None
        assert open_source(str(tmp_path / "no-kmsg")) is None
    assert open_source("off") is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("kernel log monitor off" in w for w in warnings)
    assert all("\n" not in w for w in warnings)


def test_herd_agent_refuses_a_bad_kmsg_source_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from herdbook.cli.main import app
    result = CliRunner().invoke(app, ["agent", "--state-dir", str(tmp_path), "--fake-gpus", "1",
                                      "--kmsg-source", "syslog"],
                                env={"HERD_SERVER": None, "HERD_CREDS": None})
    assert result.exit_code == 2, result.output
    assert "invalid --kmsg-source 'syslog'" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
