"""docs/remediation.md's three validation checks are real: each block parses as the
config `herd up` reads; the DCGM one is `dcgmi diag -r 2`; the NCCL one and the burn-in
script (examples/validation/gpu-burn-in.sh) pass and fail by their stated rules when run
against stand-in programs that print what all_reduce_perf, gpu_burn and nvidia-smi print."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from herdbook.config import ValidationConfig, parse_config

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs/remediation.md"
SCRIPT = ROOT / "examples/validation/gpu-burn-in.sh"


def checks() -> dict[str, ValidationConfig]:
    text = PAGE.read_text()
    section = text[text.index("### Three checks"):text.index("## Repairs")]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    out = {}
    for block in blocks:
        check = parse_config(block.encode(), "docs/remediation.md").validation
        out[check.name] = check
    return out


def test_the_three_examples_parse_and_the_dcgm_one_is_dcgmi_diag_level_2() -> None:
    found = checks()
    assert set(found) == {"dcgm-diag", "nccl-allreduce", "burn-in"}
    assert found["dcgm-diag"].command == ["dcgmi", "diag", "-r", "2"]
    assert found["burn-in"].command[1:] == ["5"]
    assert found["burn-in"].command[0].endswith(SCRIPT.name)


# all_reduce_perf's output, its columns squeezed (awk splits on runs of blanks anyway);
# the bandwidth line ends in a blank, as nccl-tests prints it
NCCL_ROWS = "\n".join([
    "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 4294967296 step: 2(factor) "
    "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0",
    "#",
    "#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong",
    "#  (B)  (elements)  (us)  (GB/s)  (GB/s)  (us)  (GB/s)  (GB/s)",
    "  1073741824  268435456  float  sum  -1  4671.2  229.86  402.26  0  4660.1  230.41  "
    "403.22  0",
    "  4294967296  1073741824  float  sum  -1  17627  243.66  {bw}  {wrong}  17620  243.75  "
    "426.57  0",
    "# Out of bounds values : {oob}",
    "# Avg bus bandwidth    : {bw} ",
    "#", ""])


def stand_ins(tmp: Path, **programs: str) -> dict[str, str]:
    """Programs of these names printing these texts (an exit code after a NUL)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, spec in programs.items():
        text, _, code = spec.partition("\0")
        (bin_dir / f"{name}.out").write_text(text)
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\ncat '{bin_dir / name}.out'\nexit {code or 0}\n")
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def run(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30,
                          check=False)
    lines = done.stdout.strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


SMI_L = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})\n" for i in range(8))


@pytest.mark.parametrize(("bw", "oob", "crash", "ok", "last"), [
    ("415.71", "0 OK", False, True, "busbw 415.71 GB/s"),
    ("212.40", "0 OK", False, False, "busbw 212.40 GB/s"),            # half-width NVLink
    ("415.71", "3 FAILED", False, False, "busbw 415.71 GB/s, wrong results"),
    ("", "", True, False, "busbw none GB/s"),                          # it did not run
])
def test_the_nccl_check_passes_by_its_rule(tmp_path: Path, bw: str, oob: str, crash: bool,
                                           ok: bool, last: str) -> None:
    output = ("" if crash else NCCL_ROWS.format(bw=bw, oob=oob, wrong=0 if ok else 12))
    env = stand_ins(tmp_path, all_reduce_perf=output + ("\0" + "1" if crash else ""),
                    **{"nvidia-smi": SMI_L})
    code, line = run(checks()["nccl-allreduce"].command, env)
    assert (code == 0, line) == (ok, last)


BURN_OK = "Tested 8 GPUs:\n" + "".join(f"\tGPU {i}: OK\n" for i in range(8))
QUERY_OK = "".join(f"{i}, 0, Not Active\n" for i in range(8))


@pytest.mark.parametrize(("burn", "query", "ok", "last"), [
    (BURN_OK, QUERY_OK, True, "burn-in passed: 5m, no faulty GPU, no uncorrected ECC "
                              "error, no HW slowdown"),
    (BURN_OK.replace("GPU 3: OK", "GPU 3: FAULTY"), QUERY_OK, False, "gpu_burn: GPU 3: FAULTY"),
    (BURN_OK, QUERY_OK.replace("3, 0, Not Active", "3, 2, Not Active"), False,
     "after burn-in: GPU 3 (uncorrected ECC 2, HW slowdown Not Active)"),
    (BURN_OK, QUERY_OK.replace("5, 0, Not Active", "5, [N/A], Active"), False,
     "after burn-in: GPU 5 (uncorrected ECC [N/A], HW slowdown Active)"),
    ("CUDA error: no device\0" + "1", QUERY_OK, False, "gpu_burn exited 1"),
    (BURN_OK, "NVIDIA-SMI has failed\0" + "9", False, "nvidia-smi failed after the burn-in"),
])
def test_the_burn_in_script_passes_by_its_rule(tmp_path: Path, burn: str, query: str,
                                               ok: bool, last: str) -> None:
    env = stand_ins(tmp_path, gpu_burn=burn, **{"nvidia-smi": query})
    code, line = run([str(SCRIPT), "5"], env)
    assert (code == 0, line) == (ok, last)


def test_the_lifecycle_picture_names_real_events_on_every_step() -> None:
    """The picture opens the page, links its three sections, and every event it names is
    one herdbook writes (a renamed event fails here, not in a reader's head)."""
    from herdbook.events.codec import EVENT_TYPES
    text = PAGE.read_text()
    assert text.index("## The lifecycle") < text.index("## Validation")
    intro = text[:text.index("## The lifecycle")]
    assert all(f"(#{s})" in intro for s in ("validation", "repairs", "checks"))
    picture = re.search(r"## The lifecycle.*?```text\n(.*?)```", text, re.S)
    assert picture is not None
    named = set(re.findall(r"\b((?:node|alloc)\.[a-z_]+)", picture.group(1)))
    tags = {cls.__struct_config__.tag for cls in EVENT_TYPES}
    assert named - tags == set()
    assert {"node.health_changed", "node.degraded", "node.down", "node.cordoned",
            "node.drained", "node.boot_started", "node.terminated", "node.uncordoned",
            "node.validation_started", "node.validated", "node.validation_failed",
            "alloc.placed"} <= named
    for step in ("FAULT DETECTED", "UNHEALTHY", "QUARANTINED", "DRAINED",
                 "VALIDATING", "BACK IN SERVICE"):
        assert step in picture.group(1)
    assert picture.group(1).count("⛔") >= 3        # where the breaker can hold a step
