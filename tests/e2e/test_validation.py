"""The validation gate end to end (docs/remediation.md#validation): real `herd up`
processes, real agents with fake GPUs, the check a real script the agent runs as an
allocation, reading the fake GPUs as a real check reads NVML (``HERD_FAKE_GPUS``). A fault
injected into them (`herd agent inject`) that the script detects keeps the node out
(UNHEALTHY, the script's last line as the reason) and the workload system is told
(an exec notifier); cleared, the node is validated back in, and resumed outside only
then; a SIGKILL of the leader while the check runs changes nothing (one placement, one
verdict)."""

from __future__ import annotations

import json
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet
from tests.e2e.test_replicas import Replicas, leading_replica, status

pytestmark = pytest.mark.e2e

# The check: a burn-in that fails on what it finds wrong with the node's GPUs, read from
# the fake NVML backend as a telemetry sample (HW throttling, a link down, a failed row
# remap), the faults by name on its last line; a hold file keeps it running (a long diag).
SCRIPT = """#!{python}
import json, os, sys, time
print("checking", os.environ["HERD_NODE_ID"], flush=True)
while os.path.exists("{dir}/hold"):
    time.sleep(0.2)
with open(os.environ["HERD_FAKE_GPUS"]) as f:
    gpus = json.load(f)["gpus"]
def faults(g):
    found = [n for n in g.get("throttle_names") or () if n.startswith("hw_")]
    found += [f"NVLink {{i}} down" for i, up in enumerate(g.get("nvlink_up") or ()) if not up]
    return found + (["row remap failed"] if g.get("remapped_rows_failed") else [])
bad = [f"GPU {{g['index']}}: {{', '.join(faults(g))}}" for g in gpus if faults(g)]
print("; ".join(bad) or "all GPUs pass")
sys.exit(3 if bad else 0)
"""

# The workload system: an exec notifier that writes each notification down.
NOTIFIER = """notifier:
  type: exec
  retries: 0
  exec:
    cordon: 'echo cordon "$HERD_EVENT_ID" "$HERD_RECOMMENDED_ACTION" >> {dir}/notified'
    uncordon: 'echo uncordon "$HERD_EVENT_ID" >> {dir}/notified'
"""


def config(tmp: Path, extra: str = "") -> str:
    script = tmp / "check.py"
    script.write_text(SCRIPT.format(dir=tmp, python=sys.executable))
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


def notified(tmp: Path) -> list[list[str]]:
    path = tmp / "notified"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def event_ids(url: str, node_id: str) -> dict[str, list[str]]:
    """The node's event ids by type, in log order."""
    tail = herd("events", "tail", "-o", "json", "--subject", f"herd.node.{node_id}.>",
                server=url, check=True)
    out: dict[str, list[str]] = {}
    for line in tail.stdout.splitlines():
        event = json.loads(line)
        out.setdefault(event["type"], []).append(event["event_id"])
    return out


def inject(url: str, *fault: str) -> None:
    result = herd("agent", "inject", "--node", "g1", *fault, server=url)
    assert result.returncode == 0, result.stderr


def test_a_fault_the_check_finds_keeps_the_node_out_and_a_cleared_one_lets_it_back(
        fleet: Fleet, tmp_path: Path) -> None:
    (tmp_path / "hold").write_text("")
    fleet.up(config(tmp_path, NOTIFIER.format(dir=tmp_path)))
    fleet.agent("g1", "--labels", "rack=r1")
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
    # GPU 1's power brake engages: an idle check sees nothing (it must last 5m to be a
    # fault), the burn-in does
    inject(fleet.url, "throttle", "128", "--gpu", "1")
    (tmp_path / "hold").unlink()
    wait_until(lambda: fleet.state("g1") == "UNHEALTHY", timeout=60, what="g1 UNHEALTHY")
    detail = fleet.describe("g1")
    assert "burn-in exited 3: GPU 1: hw_power_brake" in detail["health_reason"]
    assert detail["schedulable"] is False
    assert (detail["validation"], detail["validation_failures"]) == ("failed", 1)
    assert detail["recommended_action"] == "inspect_hardware"
    [failed] = allocs(fleet.url)
    assert failed["status"] == "failed"

    # the fault is still there: an uncordon validates again, and the second failure
    # within the window (quarantine_after: 2) quarantines it
    assert herd("node", "uncordon", "g1", server=fleet.url).returncode == 0
    wait_until(lambda: fleet.state("g1") == "QUARANTINED", timeout=60,
               what="g1 QUARANTINED after two failed checks")
    assert len(allocs(fleet.url)) == 2

    # cleared: out of quarantine the operator's way (disable, enable), validated back in
    inject(fleet.url, "clear")
    assert herd("node", "disable", "g1", "--yes", server=fleet.url).returncode == 0
    assert herd("node", "enable", "g1", server=fleet.url).returncode == 0
    wait_until(lambda: fleet.state("g1") == "READY", timeout=60, what="g1 READY")
    assert fleet.nodes()["g1"]["schedulable"] is True
    assert sorted(a["status"] for a in allocs(fleet.url)) == ["complete", "failed", "failed"]

    # on demand: refused where it cannot run, then one more check of a READY idle node,
    # chosen by a selector
    bad = herd("node", "validate", "nope", server=fleet.url)
    assert bad.returncode == 1 and "not found" in bad.stderr
    assert herd("node", "validate", "-l", "rack=r1", "-m", "after the PDU swap",
                server=fleet.url).returncode == 0
    wait_until(lambda: len(allocs(fleet.url)) == 4 and fleet.state("g1") == "READY",
               timeout=60, what="the on-demand check passed")

    # the workload system followed the gate: cordoned when the node was due and whenever a
    # check started or failed (with the recommended action), resumed only by a pass, never
    # by the operator's uncordon of the faulted node
    ids = event_ids(fleet.url, "g1")
    wait_until(lambda: [n[1] for n in notified(tmp_path) if n[0] == "uncordon"]
               == ids["node.validated"], what="an uncordon for each pass")
    lines = notified(tmp_path)
    cordons = [line[1:] for line in lines if line[0] == "cordon"]
    assert [i for i, *action in cordons if action == ["inspect_hardware"]] \
        == ids["node.validation_failed"]
    assert set(ids["node.validation_started"]) <= {i for i, *_ in cordons}
    assert set(ids["node.approved"] + ids["node.disabled"]) <= {i for i, *_ in cordons}
    [operator] = ids["node.uncordoned"]
    assert all(line[1] != operator for line in lines)


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
