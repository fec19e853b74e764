"""GPU health end to end: fault injection into a fake-NVML agent, the CEL classifier,
fatal events, the unhealthy threshold and sticky UNHEALTHY."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 2s
  grace_period: {standard: 30s}
approval: {auto_approve: true}
health:
  unhealthy_threshold: 2
"""

XID13_UNHEALTHY = """\
version: 1
rules:
  - name: fatal-xid
    condition: event.kind == "xid" && event.xid == 79
    result: fatal
  - name: xid-13-is-unhealthy-here
    condition: event.kind == "xid" && event.xid == 13
    result: unhealthy
"""


def inject(fleet: Fleet, node: str, *fault: str) -> None:
    result = herd("agent", "inject", "--node", node, *fault, server=fleet.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Ok")


def test_a_fatal_xid_takes_the_node_down_within_a_second(fleet: Fleet) -> None:
    fleet.up(CONFIG)
    fleet.agent("gpu-1", "--fake-gpus", "8")
    wait_until(lambda: fleet.state("gpu-1") == "READY", what="READY")
    started = datetime.now(UTC)
    inject(fleet, "gpu-1", "xid", "79", "--gpu", "3")
    wait_until(lambda: fleet.state("gpu-1") == "DOWN", timeout=5, interval=0.05, what="DOWN")
    # measured on the event itself (stamped by the control plane on this host's clock),
    # not on the polling CLI
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.gpu-1.down",
                server=fleet.url, check=True)
    down_at = datetime.fromisoformat(json.loads(tail.stdout.splitlines()[-1])["at"])
    assert (down_at - started).total_seconds() < 1.0, down_at - started
    node = json.loads(herd("node", "describe", "gpu-1", "-o", "json", server=fleet.url,
                           check=True).stdout)
    assert node["health"] == "UNHEALTHY"
    assert "XID 79 on GPU 3" in node["lifecycle_reason"]


def test_unhealthy_after_the_threshold_and_sticky_until_uncordon(fleet: Fleet,
                                                                 tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(XID13_UNHEALTHY)
    assert herd("health", "check-policy", str(policy)).returncode == 0
    fleet.up(CONFIG + f"  policy: {policy}\n")
    fleet.agent("gpu-2", "--fake-gpus", "4")
    wait_until(lambda: fleet.state("gpu-2") == "READY", what="READY")

    inject(fleet, "gpu-2", "xid", "13")
    time.sleep(0.5)
    assert fleet.nodes()["gpu-2"]["health"] != "UNHEALTHY"   # one is not enough
    inject(fleet, "gpu-2", "xid", "13", "--gpu", "1")
    wait_until(lambda: fleet.state("gpu-2") == "UNHEALTHY", timeout=5, what="UNHEALTHY")

    # a healthy report does not clear it: UNHEALTHY is sticky
    inject(fleet, "gpu-2", "clear")
    time.sleep(0.5)
    assert fleet.nodes()["gpu-2"]["health"] == "UNHEALTHY"
    assert not fleet.nodes()["gpu-2"]["schedulable"]

    # the operator checked the hardware: uncordon clears it, the next report is healthy
    assert herd("node", "uncordon", "gpu-2", "-m", "reseated GPU 1",
                server=fleet.url).returncode == 0
    inject(fleet, "gpu-2", "clear")
    wait_until(lambda: fleet.nodes()["gpu-2"]["health"] == "HEALTHY", timeout=5,
               what="HEALTHY")
    assert fleet.state("gpu-2") == "READY"


def test_bad_policies_and_real_nvml_agents_are_refused(fleet: Fleet, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - name: broken-rule\n    condition: event.kind ==\n"
                   "    result: fatal\n")
    result = herd("health", "check-policy", str(bad))
    assert result.returncode == 1 and "broken-rule" in result.stderr
    assert "Syntax error" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    fleet.up(CONFIG)
    fleet.agent("cpu-1", "--fake-gpus", "0")
    wait_until(lambda: fleet.state("cpu-1") == "READY", what="READY")
    refused = herd("agent", "inject", "--node", "cpu-1", "xid", "79", server=fleet.url)
    assert refused.returncode == 1 and "no GPU 0" in refused.stderr
    # an agent without --fake-gpus reads real NVML (none here): injection is refused
    fleet.spawn("real-1", "agent", "--server", fleet.url, "--node-id", "real-1",
                "--state-dir", str(tmp_path / "real-1"), "--heartbeat-interval", "0.2")
    wait_until(lambda: fleet.state("real-1") == "READY", what="real-1 READY")
    real = herd("agent", "inject", "--node", "real-1", "xid", "79", server=fleet.url)
    assert real.returncode == 1 and "uses real NVML" in real.stderr
    nobody = herd("agent", "inject", "--node", "ghost", "xid", "79", server=fleet.url)
    assert nobody.returncode == 1 and "no agent ghost" in nobody.stderr
