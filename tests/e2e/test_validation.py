"""The validation gate end to end (docs/remediation.md#validation): real `herd up`
processes, real agents with fake GPUs, the check a real script the agent runs as an
allocation. An injected fault the script detects keeps the node out (UNHEALTHY, the
script's last line as the reason); cleared, an uncordon validates it back in; a SIGKILL
of the leader while the check runs changes nothing (one placement, one verdict)."""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet
from tests.e2e.test_replicas import Replicas, leading_replica, status

pytestmark = pytest.mark.e2e

# The check: a fault injected as a file (what a GPU burn-in finds broken) fails it with
# the fault's name as its last line; a hold file keeps it running (a long diag).
SCRIPT = """#!/bin/sh
echo "checking $HERD_NODE_ID"
while [ -e "{dir}/hold" ]; do sleep 0.2; done
if [ -e "{dir}/fault" ]; then echo "GPU 1: $(cat {dir}/fault)"; exit 3; fi
echo "all GPUs pass"
"""


def config(tmp: Path, extra: str = "") -> str:
    script = tmp / "check.sh"
    script.write_text(SCRIPT.format(dir=tmp))
    script.chmod(0o755)
    return f"""
lifecycle:
  heartbeat_timeout: 1s
  grace_period: {{standard: 1500ms}}
approval: {{auto_approve: true}}
validation:
  name: burn-in
  command: [{script}]
  timeout: 2m
{extra}"""


def allocs(url: str) -> list[dict[str, Any]]:
    out = herd("alloc", "list", "-o", "json", server=url, check=True)
    return [a for a in json.loads(out.stdout) if a["job_id"] == "node-validation"]


def test_a_fault_the_check_finds_keeps_the_node_out_and_a_cleared_one_lets_it_back(
        fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "fault").write_text("Xid 79: fell off the bus")
    (tmp_path / "hold").write_text("")
    fleet.up(config(tmp_path))
    fleet.agent("g1")
    # first approval: VALIDATING while the check runs, not schedulable
    wait_until(lambda: fleet.state("g1") == "VALIDATING", timeout=60, what="g1 VALIDATING")
    node = fleet.nodes()["g1"]
    assert node["schedulable"] is False
    wait_until(lambda: [a["status"] for a in allocs(fleet.url)] == ["running"], timeout=30,
               what="the check running as an allocation")
    # describe names the check, its allocation and why it runs; the table says so in a line
    [running] = allocs(fleet.url)
    detail = fleet.describe("g1")
    assert (detail["validation"], detail["validation_trigger"], detail["validation_check"],
            detail["validation_alloc"]) == ("running", "approved", "burn-in", running["id"])
    table = herd("node", "describe", "g1", server=fleet.url, check=True).stdout
    assert f"validating: burn-in (approved) runs as allocation {running['id']}" in table
    # not counted healthy on herd status (nor schedulable)
    score = json.loads(herd("status", "-o", "json", server=fleet.url, check=True).stdout)[
        "health_score"]
    assert (score["validating"], score["gpus_healthy"], score["schedulable"]) == (1, 0.0, 0.0)
    (tmp_path / "hold").unlink()
    wait_until(lambda: fleet.state("g1") == "UNHEALTHY", timeout=60, what="g1 UNHEALTHY")
    detail = fleet.describe("g1")
    assert "burn-in exited 3: GPU 1: Xid 79: fell off the bus" in detail["health_reason"]
    assert detail["schedulable"] is False
    assert (detail["validation"], detail["validation_failures"]) == ("failed", 1)
    [failed] = allocs(fleet.url)
    assert failed["status"] == "failed"

    # the fault is still there: an uncordon validates again, and the second failure
    # within the window (quarantine_after: 2) quarantines it
    assert herd("node", "uncordon", "g1", server=fleet.url).returncode == 0
    wait_until(lambda: fleet.state("g1") == "QUARANTINED", timeout=60,
               what="g1 QUARANTINED after two failed checks")
    assert len(allocs(fleet.url)) == 2

    # cleared: out of quarantine the operator's way (disable, enable), validated back in
    (tmp_path / "fault").unlink()
    assert herd("node", "disable", "g1", "--yes", server=fleet.url).returncode == 0
    assert herd("node", "enable", "g1", server=fleet.url).returncode == 0
    wait_until(lambda: fleet.state("g1") == "READY", timeout=60, what="g1 READY")
    assert fleet.nodes()["g1"]["schedulable"] is True
    assert sorted(a["status"] for a in allocs(fleet.url)) == ["complete", "failed", "failed"]

    # on demand: refused where it cannot run, then one more check of a READY idle node
    bad = herd("node", "validate", "nope", server=fleet.url)
    assert bad.returncode == 1 and "not found" in bad.stderr
    assert herd("node", "validate", "g1", "-m", "after the PDU swap",
                server=fleet.url).returncode == 0
    wait_until(lambda: len(allocs(fleet.url)) == 4 and fleet.state("g1") == "READY",
               timeout=60, what="the on-demand check passed")


def test_the_check_survives_a_sigkill_of_the_leader(tmp_path: Path) -> None:
    replicas = Replicas(tmp_path)
    replicas.server.start()
    replicas.url = replicas.server.url
    try:
        (tmp_path / "hold").write_text("")
        (tmp_path / "herd.yaml").write_text(config(tmp_path, "leader_ttl: 2s\n"))
        planes = {}
        for name in ("cp-a", "cp-b"):
            planes[name] = replicas.spawn(
                name, "up", "--nats-url", replicas.url, "--config",
                str(tmp_path / "herd.yaml"), "--data-dir", str(tmp_path / name),
                "--node-id", name)
        wait_until(lambda: herd("node", "list", server=replicas.url).returncode == 0,
                   timeout=30)
        replicas.agent("g1")
        wait_until(lambda: [a["status"] for a in allocs(replicas.url)] == ["running"],
                   timeout=60, what="the check running")
        assert replicas.state("g1") == "VALIDATING"

        leader = leading_replica(replicas.url)
        planes[leader].send_signal(signal.SIGKILL)
        planes[leader].wait()
        wait_until(lambda: status(replicas.url)["leader"], timeout=20, what="a new leader")
        assert replicas.state("g1") == "VALIDATING"

        (tmp_path / "hold").unlink()
        wait_until(lambda: replicas.state("g1") == "READY", timeout=60, what="g1 READY")
        events = replicas.events()
        mine = Counter(e.event_name for e in events if e.aggregate_id == "g1"
                       and "validat" in e.event_name)
        assert mine == {"validation_started": 1, "validated": 1}, mine
        placed = [e for e in events if e.event_name.endswith(".placed")]
        assert len(placed) == 1
        [check] = allocs(replicas.url)
        assert check["status"] == "complete"
    finally:
        replicas.stop()
