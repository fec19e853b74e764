"""The agent's telemetry sampler (issue 27 item 1) through the fake NVML backend, which
has pynvml's function names and error codes: every field of a normal GPU is read, a
field NVML lacks on a GPU is absent (never zero), injected faults move the readings,
and the readings are the same for the same seed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pynvml
import pytest

from herdbook.agent import fake_nvml, gpu, nvml_constants
from herdbook.agent import telemetry_sampler as telemetry
from herdbook.agent.fake_nvml import FakeNvml, FakeNvmlError
from herdbook.agent.telemetry_sampler import Reader, sample
from herdbook.events.codec import encode
from herdbook.events.telemetry import GpuReading

FIELDS = [name for name in GpuReading.__struct_fields__ if name != "index"]
NOW = 1_700_000_000.0


def take(nvml: Any, node: str = "n1") -> Any:
    return sample(nvml, node, "b1", NOW, hostname="host-1")


def test_every_field_of_a_normal_gpu_is_read() -> None:
    t = take(FakeNvml(count=8, seed="n1"))
    assert (t.node_id, t.boot_id, t.sampled_at, t.hostname) == ("n1", "b1", NOW, "host-1")
    assert [g.index for g in t.gpus] == list(range(8))
    for reading in t.gpus:
        missing = [name for name in FIELDS if getattr(reading, name) in (None, "")]
        assert missing == [], f"GPU {reading.index} lacks {missing}"
    first = t.gpus[0]
    assert first.pci_bus_id == fake_nvml.fake_bus_id(0) and first.uuid.startswith("GPU-")
    assert 30 <= first.temperature_c <= 50 and 0 < first.power_w < first.power_limit_w == 700
    assert first.fb_total_mib == 81920 and 0 < first.fb_used_mib < first.fb_total_mib
    assert (first.pcie_gen, first.pcie_width) == (first.pcie_gen_max, first.pcie_width_max)
    assert first.nvlink_up == (True,) * 18 and first.throttle_names == ("gpu_idle",)


def test_a_field_nvml_lacks_is_absent_not_zero() -> None:
    nvml = FakeNvml(count=3, seed="n1")
    # GPU 1: a PCIe card without ECC or NVLink, and a driver that predates row remapping
    nvml.gpus[1].unsupported = {
        "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetSerial",
        "nvmlDeviceGetRemappedRows", "nvmlDeviceGetPowerManagementLimit"}
    t = take(nvml)
    lacking = t.gpus[1]
    absent = {"ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
              "nvlink_up", "serial", "remapped_rows_correctable", "remapped_rows_uncorrectable",
              "remapped_rows_pending", "remapped_rows_failed", "power_limit_w"}
    assert {name for name in FIELDS if getattr(lacking, name) is None} == absent
    # absent on the wire too: a dashboard sees no series, not a 0
    wire = msgspec.json.decode(encode(lacking))
    assert not absent & set(wire) and wire["power_w"] > 0
    # the GPUs beside it keep every field
    assert all(getattr(t.gpus[i], name) is not None for i in (0, 2) for name in FIELDS)


def test_a_gpu_that_fell_off_the_bus_keeps_its_identity_and_counters_only() -> None:
    nvml = FakeNvml(count=2, seed="n1")
    nvml.inject("xid", 1, 79)
    lost = take(nvml).gpus[1]
    assert lost.uuid and lost.pci_bus_id and lost.model
    for name in ("temperature_c", "power_w", "gpu_util_pct", "sm_clock_mhz", "pcie_width",
                 "nvlink_up", "throttle_reasons"):
        assert getattr(lost, name) is None, name


def test_no_handle_is_a_gpu_with_its_index_only_and_no_count_is_no_gpu() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
            if index == 1:
                raise FakeNvmlError(nvml_constants.NVML_ERROR_GPU_IS_LOST)
            return super().nvmlDeviceGetHandleByIndex(index)

    t = take(Broken(count=2, seed="n1"))
    assert msgspec.json.decode(encode(t.gpus[1])) == {"index": 1,
                                                      "driver_version": "550.54.15-fake"}

    class Uncountable(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise FakeNvmlError(nvml_constants.NVML_ERROR_UNKNOWN)

    assert take(Uncountable(count=2)).gpus == ()


def test_injected_faults_move_the_readings() -> None:
    nvml = FakeNvml(count=2, seed="n1")
    before = take(nvml).gpus[0]
    nvml.inject("thermal", 0, 92)
    nvml.inject("ecc-sbe", 0, 5)
    nvml.inject("ecc-dbe", 0, 2)
    nvml.inject("nvlink", 0, 3)
    nvml.inject("nvlink-down", 0, 0)
    nvml.inject("pcie", 0, 150)
    after, other = take(nvml).gpus
    assert after.temperature_c == 92.0
    assert {"sw_thermal", "hw_thermal"} <= set(after.throttle_names or ())
    assert after.sm_clock_mhz < before.sm_clock_mhz
    assert after.ecc_sbe_volatile == before.ecc_sbe_volatile + 5
    assert after.ecc_sbe_aggregate == before.ecc_sbe_aggregate + 5
    assert (after.ecc_dbe_volatile, after.ecc_dbe_aggregate) == (2, 2)
    assert after.remapped_rows_uncorrectable == 2 and after.remapped_rows_pending is True
    assert after.retired_pages_dbe == 2 and after.retired_pages_pending is True
    assert after.nvlink_up is not None and after.nvlink_up[0] is False
    assert all(after.nvlink_up[1:])
    assert after.pcie_replay_count == 150 and after.pcie_width == 8 < after.pcie_width_max
    assert other == take(FakeNvml(count=2, seed="n1")).gpus[1]   # only GPU 0 moved
    nvml.inject("clear")
    cleared = take(nvml).gpus[0]
    assert cleared.temperature_c == before.temperature_c
    assert cleared.nvlink_up == before.nvlink_up and cleared.pcie_width == 16
    assert cleared.throttle_names == ("gpu_idle",)
    assert cleared.ecc_sbe_aggregate == before.ecc_sbe_aggregate + 5   # counters stay


def test_readings_are_deterministic_per_seed() -> None:
    assert take(FakeNvml(count=8, seed="n1")) == take(FakeNvml(count=8, seed="n1"))
    one, two = take(FakeNvml(count=8, seed="n1")), take(FakeNvml(count=8, seed="n2"))
    assert [g.uuid for g in one.gpus] != [g.uuid for g in two.gpus]
    assert [(g.temperature_c, g.power_w, g.serial) for g in one.gpus] != [
        (g.temperature_c, g.power_w, g.serial) for g in two.gpus]
    # and they differ from GPU to GPU within a node, plausibly
    assert len({(g.power_w, g.fb_used_mib) for g in one.gpus}) > 1


def test_pynvml_errors_are_caught_by_their_class_and_other_errors_are_not() -> None:
    class RealLike:
        """A backend raising pynvml's own errors, as the real module does."""

        NVMLError = pynvml.NVMLError

        def nvmlDeviceGetSerial(self, handle: object) -> str:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

        def nvmlDeviceGetRemappedRows(self, handle: object) -> Any:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        def nvmlDeviceGetName(self, handle: object) -> bytes:
            return b"NVIDIA A100-SXM4-40GB"   # older pynvml: bytes

        def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
            raise RuntimeError("a bug, not a missing field")

    r = Reader(RealLike())
    assert r.get("nvmlDeviceGetSerial", None) is None
    assert r.get("nvmlDeviceGetRemappedRows", None) is None
    assert r.get("nvmlDeviceGetPcieReplayCounter", None) is None   # not wrapped at all
    assert telemetry._identity(r, None)["model"] == "NVIDIA A100-SXM4-40GB"
    with pytest.raises(RuntimeError, match="a bug"):
        r.get("nvmlDeviceGetTemperature", None, 0)


def test_the_fake_mirrors_pynvml_names_and_codes() -> None:
    source = Path(telemetry.__file__).read_text()
    called = set(re.findall(r'"(nvml\w+)"', source))
    assert len(called) >= 20
    for name in called:
        assert callable(getattr(pynvml, name, None)), f"pynvml has no {name}"
        assert callable(getattr(FakeNvml, name, None)), f"FakeNvml has no {name}"
    for const in ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                  "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_INVALID_ARGUMENT", "NVML_CLOCK_SM",
                  "NVML_CLOCK_MEM", "NVML_AGGREGATE_ECC", "NVML_VOLATILE_ECC",
                  "NVML_FEATURE_ENABLED", "NVML_TEMPERATURE_GPU",
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):
        assert getattr(nvml_constants, const) == getattr(pynvml, const), const
    for bit, _ in nvml_constants.THROTTLE_REASONS:
        assert bit & pynvml.nvmlClocksThrottleReasonAll == bit
    err = FakeNvmlError(nvml_constants.NVML_ERROR_NOT_SUPPORTED)
    assert (err.value, str(err)) == (pynvml.NVML_ERROR_NOT_SUPPORTED,
                                     str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)))
    assert FakeNvml.NVMLError is FakeNvmlError


def test_every_nvml_call_of_the_agent_exists_in_pynvml_and_the_fake() -> None:
    """Not only the sampler's: the boot check, the health monitor, the deeper checks and
    the inventory call NVML too, by attribute (``nvml.nvmlDeviceGetCount()``) or by name
    (``r.get("nvml...")``). A name pynvml lacks would fail only on a real GPU; one the
    fake lacks, only in the tests that reach it."""
    agent = Path(telemetry.__file__).parent
    source = "".join(p.read_text() for p in sorted(agent.glob("*.py")))
    called = (set(re.findall(r"\.(nvml[A-Z]\w*)\(", source))
              | set(re.findall(r'"(nvml[A-Z]\w*)"', source)))
    assert {"nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
            "nvmlDeviceGetNvLinkErrorCounter", "nvmlDeviceGetRemappedRows"} <= called
    for name in sorted(called):
        assert callable(getattr(pynvml, name, None)), f"pynvml has no {name}"
        assert callable(getattr(FakeNvml, name, None)), f"FakeNvml has no {name}"


def test_eight_gpus_fit_well_under_a_max_payload() -> None:
    size = len(encode(take(FakeNvml(count=8, seed="gpu-0001"), "gpu-0001")))
    assert 4_000 < size < 16_000   # docs/gpus.md "Where telemetry flows" quotes ~7.3 KB


def test_herd_agent_sample_prints_what_the_agent_would_publish(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from herdbook.cli.main import app
    from herdbook.events.telemetry import GpuTelemetry

    result = CliRunner().invoke(app, ["agent", "sample", "--fake-gpus", "8", "--node-id", "n1"],
                                env={"HERD_SERVER": None, "HERD_CREDS": None})
    assert result.exit_code == 0, result.output
    printed = msgspec.json.decode(result.stdout, type=GpuTelemetry)
    expected = sample(FakeNvml(count=8, seed="n1"), "n1", "sample", printed.sampled_at,
                      printed.hostname)
    assert printed == expected and len(printed.gpus) == 8
    # no NVIDIA driver here: one line, exit 1
    monkeypatch.setattr(gpu, "real_nvml", lambda: None)
    result = CliRunner().invoke(app, ["agent", "sample"], env={"HERD_SERVER": None})
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "no NVML here" in result.stderr


@pytest.mark.parametrize(("flag", "interval"), [([], 15.0), (["--telemetry-interval", "off"], None),
                                                (["--telemetry-interval", "1m"], 60.0)])
def test_herd_agent_passes_its_telemetry_interval(flag: list[str], interval: float | None,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    from typer.testing import CliRunner

    import herdbook.agent.main
    from herdbook.cli import client
    from herdbook.cli.main import app

    seen: list[Any] = []

    async def run_agent(options: Any) -> None:
        seen.append(options)

    monkeypatch.setattr(client, "check_server", lambda server: None)
    monkeypatch.setattr(herdbook.agent.main, "run_agent", run_agent)
    result = CliRunner().invoke(app, ["agent", "--node-id", "n1", "--fake-gpus", "2",
                                      "--state-dir", str(tmp_path / "a"), *flag],
                                env={"HERD_SERVER": None, "HERD_CREDS": None})
    assert result.exit_code == 0, result.output
    assert [o.telemetry_interval for o in seen] == [interval]


def test_the_nvml_probe_reports_every_call_and_the_floor_beside_the_sample(
        capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import nvml_probe

    assert nvml_probe.main(["--fake-gpus", "2", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    head = json.loads(out[:out.rindex("}") + 1])
    assert head["agent_calls_missing_from_this_nvml"] == []
    assert head["calls"]["nvmlDeviceGetTemperature"] == "ok"
    assert head["absent_readings"] == []
    rows = [line for line in out.splitlines() if "ms CPU per call" in line]
    assert [r.split("  ")[0] for r in rows] == [
        "sample (herd agent, --telemetry-interval)", "floor: the same NVML calls, bare",
        "health report (--health-interval)"]
