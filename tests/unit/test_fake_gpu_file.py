"""A fake node's GPUs as its allocations see them (``agent/fake_gpu_file.py``): given the
fake NVML backend, when a fault is injected and the file rewritten, then a check reading
``HERD_FAKE_GPUS`` finds it where a real check would read NVML."""

from __future__ import annotations

import json
from pathlib import Path

from herdbook.agent import fake_gpu_file
from herdbook.agent.executor import Executor
from herdbook.agent.fake_nvml import FakeNvml


async def nothing(event: object) -> None:
    return None


def read(path: Path) -> list[dict[str, object]]:
    gpus: list[dict[str, object]] = json.loads(path.read_text())["gpus"]
    return gpus


def test_allocations_read_the_fake_gpus_and_an_injected_fault(tmp_path: Path) -> None:
    nvml = FakeNvml(count=4, seed="g1")
    executor = Executor("g1", tmp_path, nothing)
    path = fake_gpu_file.expose(nvml, "g1", executor)
    assert executor.env == {"HERD_FAKE_GPUS": str(path)}
    assert path == tmp_path / "fake-gpus.json"
    gpus = read(path)
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert all(all(g["nvlink_up"]) and not g["remapped_rows_failed"] for g in gpus)
    assert "hw_power_brake" not in str(gpus[1].get("throttle_names"))

    nvml.inject("throttle", 1, 0x80)
    nvml.inject("nvlink_down", 2, 3)
    fake_gpu_file.write(nvml, "g1", path)
    gpus = read(path)
    assert "hw_power_brake" in gpus[1]["throttle_names"]  # type: ignore[operator]
    assert gpus[2]["nvlink_up"][3] is False  # type: ignore[index]

    nvml.inject("xid", 0, 79)                # fallen off the bus: nothing answers
    nvml.inject("gpu_missing", 0, 1)
    fake_gpu_file.write(nvml, "g1", path)
    gpus = read(path)
    assert len(gpus) == 3 and "temperature_c" not in gpus[0]
    nvml.inject("clear")
    fake_gpu_file.write(nvml, "g1", path)
    gpus = read(path)
    assert len(gpus) == 4 and "hw_power_brake" not in gpus[1]["throttle_names"]  # type: ignore[operator]
    assert list(tmp_path.glob(".*.tmp")) == []     # written whole, renamed into place
