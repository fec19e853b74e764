"""Transient faults are remembered; critical is not fatal (issue 26, items 2 and 3), end
to end: a real `herd up` and a real `herd agent` (fake NVML) reporting every 0.5 s.

Given a node whose policy holds NVLink errors for 6 s and PCIe replays for 10 min, when
the agent reports one NVLink error (its next reports are clean again: the counter did
not move), then the node stays DEGRADED across the clean reports of the hold and is
HEALTHY on the first report after it; a PCIe replay holds it DEGRADED until an
operator's uncordon ends the hold at once; an XID 43 is UNHEALTHY with level critical,
fatal false and a reason that says critical, and the node stays up."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import nats
import pytest

from herdbook.health.default_policy import DEFAULT_POLICY_YAML
from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

HOLD = 6.0
CONFIG = """
lifecycle:
  heartbeat_timeout: 3s
  grace_period: {standard: 30s}
approval: {auto_approve: true}
"""
# the built-in policy, its hold cut to 6 s (a test cannot wait 10 min), PCIe replays
# held 10 min by their own rule
POLICY = DEFAULT_POLICY_YAML.replace("hold: 10m\n", f"hold: {HOLD:g}s\n").replace(
    '    condition: event.kind == "pcie"\n    result: degraded\n',
    '    condition: event.kind == "pcie"\n    result: degraded\n    hold: 10m\n')


def inject(fleet: Fleet, *fault: str) -> None:
    result = herd("agent", "inject", "--node", "gpu-1", *fault, server=fleet.url)
    assert result.returncode == 0 and result.stdout.startswith("Ok"), result.stderr


def health(fleet: Fleet) -> object:
    return fleet.nodes().get("gpu-1", {}).get("health")


def changes(fleet: Fleet) -> list[dict[str, Any]]:
    """gpu-1's node.health_changed events, oldest first."""
    out = herd("events", "tail", "-n", "100", "-o", "json", "--subject",
               "herd.node.gpu-1.health_changed", server=fleet.url, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def stored_reports(fleet: Fleet) -> int:
    """How many reports of gpu-1 HERD_HEALTH holds (read with the real client)."""
    async def count() -> int:
        nc = await nats.connect(fleet.url)
        try:
            info = await nc.jetstream().stream_info("HERD_HEALTH",
                                                   subjects_filter="herd.health.gpu-1")
            return (info.state.subjects or {}).get("herd.health.gpu-1", 0)
        finally:
            await nc.close()
    return asyncio.run(count())


def test_a_transient_fault_is_held_and_an_operator_clears_it(fleet: Fleet,
                                                              tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    checked = herd("health", "check-policy", str(policy))
    assert checked.returncode == 0 and checked.stdout.rstrip().endswith(", hold 6s")
    fleet.up(CONFIG + f"health:\n  policy: {policy}\n")
    fleet.agent("gpu-1", "--fake-gpus", "2", "--health-interval", "0.5s")
    wait_until(lambda: health(fleet) == "HEALTHY", timeout=30, what="gpu-1 HEALTHY")

    # one NVLink error: DEGRADED, and the clean reports after it do not clear it
    inject(fleet, "nvlink", "1", "--gpu", "1")
    wait_until(lambda: health(fleet) == "DEGRADED", timeout=10, what="DEGRADED")
    after_fault = stored_reports(fleet)
    wait_until(lambda: health(fleet) == "HEALTHY", timeout=HOLD + 20, interval=0.25,
               what="HEALTHY after the hold")
    clean = stored_reports(fleet) - after_fault
    assert clean >= 6, f"only {clean} reports during the hold"   # ~11 at 0.5 s
    *_, degraded, healthy = changes(fleet)
    assert (degraded["health"], degraded["level"]) == ("DEGRADED", "degraded")
    assert degraded["reason"] == ("nvlink-errors: nvlink 1 on GPU 1; held 6s after the "
                                  "last occurrence")
    assert (healthy["health"], healthy["level"]) == ("HEALTHY", "healthy")
    assert healthy["reason"] == "all checks pass; hold ended: nvlink-errors: nvlink 1 on GPU 1"
    # held for the window after the report stored it: not one clean report sooner (the
    # DEGRADED event is stamped a little after the report was stored)
    held = (datetime.fromisoformat(healthy["at"])
            - datetime.fromisoformat(degraded["at"])).total_seconds()
    assert HOLD - 1.0 <= held <= HOLD + 10, held
    assert [c["health"] for c in changes(fleet)][-3:] == ["HEALTHY", "DEGRADED", "HEALTHY"]

    # a PCIe replay, held 10 min: the operator's uncordon ends it at once
    inject(fleet, "pcie", "2", "--gpu", "0")
    wait_until(lambda: health(fleet) == "DEGRADED", timeout=10, what="DEGRADED by PCIe")
    time.sleep(2)                                          # 4 clean reports: still held
    assert health(fleet) == "DEGRADED"
    cleared = time.monotonic()
    result = herd("node", "uncordon", "gpu-1", "-m", "reseated the riser", server=fleet.url)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: health(fleet) == "HEALTHY", timeout=15, what="HEALTHY after uncordon")
    assert time.monotonic() - cleared < 15                 # not the 10 min of the hold
    assert changes(fleet)[-1]["reason"] == "all checks pass"

    # critical is not fatal: UNHEALTHY, level critical, fatal false, the node stays up
    inject(fleet, "xid", "43", "--gpu", "1")
    wait_until(lambda: health(fleet) == "UNHEALTHY", timeout=10, what="UNHEALTHY")
    critical = changes(fleet)[-1]
    assert (critical["level"], critical["fatal"]) == ("critical", False)
    assert critical["reason"] == "critical: critical-xid: XID 43 on GPU 1"
    time.sleep(1)
    assert fleet.state("gpu-1") != "DOWN"
    assert fleet.nodes()["gpu-1"]["lifecycle"] == "READY"
