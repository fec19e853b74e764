"""The fleet-scale telemetry benchmark (``benchmarks/gpu_telemetry.py``, issue 27 item 5)
run at a tiny size, so it cannot rot: a real nats-server, control plane, publisher, ``herd
gpu list`` and scrapes, every figure printed, nothing left under /tmp."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_benchmark_runs_small_and_prints_every_figure_with_its_limit() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu_telemetry", "--nodes", "50", "--gpus", "2",
         "--rate", "400", "--interval", "2", "--phase-seconds", "1", "--rounds", "1",
         "--runs", "1", "--shards", "2", "--output", "table"],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    out = result.stdout
    assert result.returncode == 0, (out + result.stderr)[-3000:]
    for figure in ("bytes per node per minute on the wire", "control plane CPU, telemetry on vs off",
                   "control plane RSS", "heartbeat ingest, telemetry on / off",
                   "herd gpu list -o table, 100 GPUs", "/metrics:",
                   "/metrics/gpus, every shard (fresh samples) (2 shards)", "reproduce:"):
        assert figure in out, f"{figure!r} not printed:\n{out[-3000:]}"
    # Each figure beside its limit or target, in brackets.
    assert re.search(r"heartbeat ingest, telemetry on / off: [\d.]+ .*\[target >= 0.9: ", out)
    # herd gpu list beside its floor (a bare client, same pages, same bytes), CPU of each
    assert re.search(r"herd gpu list .*: [\d.]+ s wall .*CPU: the CLI [\d.]+ s.*; floor "
                     r"[\d.]+ s wall .*CPU: the client [\d.]+ s.*\[target <= 1 s: (met|MISSED)", out)
    # The telemetry phase sent samples and the control plane kept them (2 s interval,
    # 50 nodes: ~25 a second), and every heartbeat offered was accepted.
    on = re.search(r"\| 1 \| on \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|", out)
    assert on is not None, out[-3000:]
    offered, accepted, samples = (int(g.replace(",", "")) for g in on.groups())
    assert samples >= 10 and accepted >= 0.9 * offered
    workdir = re.search(r"working in (\S+)", out)
    assert workdir is not None and not Path(workdir.group(1)).exists()
