"""End to end: `herd up`, two `herd agent` processes and the CLI, all real processes."""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e



def test_approve_reject_and_a_killed_agent_goes_degraded_then_down(fleet: Fleet) -> None:
    up = fleet.up()
    agent1 = fleet.agent("node-1", "--labels", "zone=a")
    agent2 = fleet.agent("node-2", "--class", "standard")
    nodes = wait_until(lambda: all(fleet.state(n) == "READY" for n in ("node-1", "node-2"))
                       and fleet.nodes(), what="both agents registered and booted")
    assert nodes["cp-1"]["type"] == "requester" and nodes["cp-1"]["approval"] == "APPROVED"
    assert nodes["node-1"]["approval"] == "PENDING" and nodes["node-1"]["state"] == "READY"
    for key in ("id", "type", "class", "approval", "lifecycle", "health", "intent", "state",
                "schedulable", "labels", "pool", "last_heartbeat", "allocations", "gpus"):
        assert key in nodes["node-1"]
    assert nodes["node-1"]["labels"] == {"zone": "a"} and nodes["node-1"]["gpus"] == 2

    ok = herd("node", "approve", "node-1", server=fleet.url)
    assert (ok.returncode, ok.stdout.strip()) == (0, "Ok")
    again = herd("node", "approve", "node-1", server=fleet.url)   # done already: exit 0
    assert (again.returncode, again.stdout.strip()) == (0, "Ok: node node-1 already approved")
    assert herd("node", "reject", "node-2", "-m", "malicious node?", server=fleet.url,
                check=True).stdout.strip() == "Ok"
    described = json.loads(herd("node", "describe", "node-2", "-o", "json", server=fleet.url,
                                check=True).stdout)
    assert described["approval"] == "REJECTED"
    assert described["approval_reason"] == "malicious node?"
    pending = herd("node", "list", "--filter-approval", "rejected", "-o", "json",
                   server=fleet.url, check=True)
    assert [n["id"] for n in json.loads(pending.stdout)] == ["node-2"]

    agent2.send_signal(signal.SIGKILL)
    agent2.wait()
    wait_until(lambda: fleet.state("node-2") == "DEGRADED", timeout=10, what="DEGRADED")
    wait_until(lambda: fleet.state("node-2") == "DOWN", timeout=10, what="DOWN")
    assert fleet.state("node-1") == "READY"
    down = herd("node", "list", "--filter-state", "disconnected", "-o", "json", server=fleet.url,
                check=True)
    assert [n["id"] for n in json.loads(down.stdout)] == ["node-2"]

    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.node-2.>",
                server=fleet.url, check=True)
    types = [json.loads(line)["type"] for line in tail.stdout.splitlines()]
    types = [t for t in types if t != "node.health_changed"]   # its first report: HEALTHY
    assert types == ["node.registered", "node.boot_checked", "node.rejected", "node.degraded",
                     "node.down"]

    # The agent restarts (a new boot): DOWN -> BOOTING -> READY, still REJECTED; with its
    # sentinel it does not register again.
    fleet.agent("node-2")
    wait_until(lambda: fleet.state("node-2") == "READY", what="node-2 back after restart")
    assert fleet.nodes()["node-2"]["approval"] == "REJECTED"
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.node-2.>",
                server=fleet.url, check=True)
    types = [json.loads(line)["type"] for line in tail.stdout.splitlines()]
    types = [t for t in types if t != "node.health_changed"]
    assert types[-2:] == ["node.boot_started", "node.boot_checked"]
    assert types.count("node.registered") == 1

    # A healed partition (the same boot heartbeats again) leaves a DOWN node DOWN,
    # shown as heartbeating.
    agent1.send_signal(signal.SIGSTOP)
    wait_until(lambda: fleet.state("node-1") == "DOWN", timeout=10, what="node-1 DOWN")
    agent1.send_signal(signal.SIGCONT)
    wait_until(lambda: fleet.nodes()["node-1"]["heartbeating"], timeout=10, what="heartbeating")
    assert fleet.state("node-1") == "DOWN"

    status = json.loads(herd("status", "-o", "json", server=fleet.url, check=True).stdout)
    assert status["instance"] == "cp-1" and status["nodes"] == 3
    assert status["liveness_detections"] >= 4 and status["projector_failed"] is None

    up.send_signal(signal.SIGTERM)
    assert up.wait(20) == 0
    assert "stopped" in (fleet.tmp / "up.log").read_text()
    unreachable = herd("node", "list", server=fleet.url)
    # the embedded nats-server went down with it
    assert unreachable.returncode == 3 and "unreachable" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


def test_delete_then_register_again_is_pending_and_auto_approve(fleet: Fleet) -> None:
    fleet.up("lifecycle: {heartbeat_timeout: 1s, grace_period: {standard: 30s}}\n"
             "approval:\n  auto_approve: true\n")
    first = fleet.agent("node-a")
    wait_until(lambda: fleet.nodes().get("node-a", {}).get("approval") == "APPROVED",
               what="auto-approved")
    # a paused agent goes DEGRADED and recovers within the grace period
    first.send_signal(signal.SIGSTOP)
    wait_until(lambda: fleet.state("node-a") == "DEGRADED", timeout=10, what="DEGRADED")
    first.send_signal(signal.SIGCONT)
    wait_until(lambda: fleet.state("node-a") == "READY", timeout=10, what="recovered")
    first.send_signal(signal.SIGTERM)
    first.wait(10)
    assert herd("node", "delete", "node-a", "-m", "gone", server=fleet.url).returncode == 0
    assert "node-a" not in fleet.nodes()
    fleet.agent("node-a")   # sentinel present, but the stream says deleted: registers again
    # auto-approve is on, so it passes through PENDING to APPROVED again
    wait_until(lambda: fleet.nodes().get("node-a", {}).get("approval") == "APPROVED",
               what="re-registered")
    tail = herd("events", "tail", "-o", "json", "--subject", "herd.node.node-a.>",
                server=fleet.url, check=True)
    types = [json.loads(line)["type"] for line in tail.stdout.splitlines()]
    assert types.count("node.registered") == 2 and "node.deleted" in types


def test_cli_errors_are_one_line_with_exit_codes(fleet: Fleet) -> None:
    fleet.up()
    missing = herd("node", "approve", "nope", server=fleet.url)
    assert missing.returncode == 1 and "not found" in missing.stderr
    bad_id = herd("node", "approve", "a.b", server=fleet.url)
    assert bad_id.returncode == 2 and "invalid node id" in bad_id.stderr
    bad_state = herd("node", "list", "--filter-state", "sleepy", server=fleet.url)
    assert bad_state.returncode == 2 and "unknown state" in bad_state.stderr
    for result in (missing, bad_id, bad_state):
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    empty = herd("events", "tail", "--subject", "herd.node.nobody.>", server=fleet.url, timeout=10)
    assert (empty.returncode, empty.stdout) == (0, "")
    nobody = herd("node", "list", server=f"nats://127.0.0.1:{free_port()}")
    assert nobody.returncode == 3 and "unreachable" in nobody.stderr
