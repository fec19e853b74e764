"""The benchmarks that print a figure beside its honest limit (issue 32 item 4), each run
at a tiny size so it cannot rot: a real nats-server and control plane per run, the limit's
line printed, the command that reproduces it, never a traceback. The figures themselves
are measured by hand (docs/performance.md); these check the benchmarks still say them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=170)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.stdout


@pytest.mark.timeout(180)
def test_heartbeat_ingest_ramps_beside_a_plain_subscriber_and_prints_the_knee() -> None:
    out = bench("benchmarks.heartbeat_ingest", "--nodes", "50", "--rate", "400",
                "--seconds", "0.3", "--ramp", "1")
    assert re.search(r"^asked 400/s: control plane [\d,]+/s of [\d,]+/s offered; "
                     r"plain subscriber [\d,]+/s of [\d,]+/s$", out, re.M), out
    assert re.search(r"^knee \(.*\): control plane .*; plain nats-py subscriber .*; the "
                     r"publisher offered at most [\d,]+/s$", out, re.M), out
    assert re.search(r"^the most accepted in a step: control plane [\d,]+/s, plain "
                     r"subscriber [\d,]+/s: ratio [\d.]+$", out, re.M), out
    assert re.search(r"^CPU per heartbeat \(median of the steps\): control plane [\d.]+ µs, "
                     r"plain subscriber [\d.]+ µs: ratio [\d.]+$", out, re.M), out
    assert re.search(r"^heartbeat ingest knee: [\d,]+/s against the plain subscriber's "
                     r"[\d,]+/s in the same run: ratio [\d.]+", out, re.M), out
    assert "reproduce: python -m benchmarks.heartbeat_ingest --nodes 50 --rate 400" in out


@pytest.mark.timeout(180)
def test_detection_latency_counts_false_alarms_while_the_live_nodes_heartbeat_on() -> None:
    # (a timeout of 2 s: a shorter one passes before the publisher process has started)
    out = bench("benchmarks.detection_latency", "--nodes", "40", "--dead", "3",
                "--timeout", "2", "--interval", "0.5")
    # two timeouts and a round of live heartbeats after the kill, false alarms counted there
    assert re.search(r"^40 nodes: 3/3 dead nodes detected; 0 live nodes wrongly degraded "
                     r"while they heartbeated 4.5s after the kill \(2.2 timeouts\)", out,
                     re.M), out
    assert "| 40 | 3/3 | 0 over 4.5 s |" in out, out


@pytest.mark.timeout(180)
def test_view_rebuild_prints_the_cpu_time_ratio_per_event() -> None:
    out = bench("benchmarks.view_rebuild", "--events", "400", "--nodes", "20", "--rounds", "1")
    assert re.search(r"^ +400 events, CPU per event: rebuild [\d.]+ µs, limit [\d.]+ µs: "
                     r"cpu ratio [\d.]+ \(per round", out, re.M), out
    assert re.search(r"CPU time per event, limit over rebuild: [\d.]+", out), out


@pytest.mark.timeout(180)
def test_placements_name_raw_plan_batches_as_the_limit() -> None:
    out = bench("benchmarks.placements", "--nodes", "4", "--count", "8", "--gpus", "2",
                "--rounds", "1", "--log-level", "none")
    assert re.search(r"^placements: .* placements/s; LIMIT, raw plan batches \(up to \d+ "
                     r"events\) .*: ratio [\d.]+ .*for comparison, raw appends", out, re.M), out
    assert "(target >= 0.7 of raw plan batches (the limit)" in out, out
