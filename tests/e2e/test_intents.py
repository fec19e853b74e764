"""Operator intents end to end: cordon, drain, disable, enable, reboot, add."""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 1s
  grace_period:
    standard: 30s
approval:
  auto_approve: true
"""


def ok(fleet: Fleet, *args: str, said: str = "Ok") -> str:
    result = herd(*args, server=fleet.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == said
    return result.stderr


def refused(fleet: Fleet, *args: str, code: int = 1) -> str:
    result = herd(*args, server=fleet.url)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


def test_intents_survive_liveness_changes(fleet: Fleet) -> None:
    fleet.up(CONFIG)
    busy = fleet.agent("busy", "--fake-allocs", "2")
    fleet.agent("idle")
    wait_until(lambda: fleet.state("busy") == "READY" and fleet.state("idle") == "READY",
               what="both READY")

    # cordon / uncordon, with their refusals and the reason on the event
    ok(fleet, "node", "cordon", "idle", "-m", "suspect fan")
    assert fleet.state("idle") == "CORDONED"
    # again: the goal holds, a success naming the state (kubectl's "already cordoned")
    ok(fleet, "node", "cordon", "idle", said="Ok: node idle already cordoned (state CORDONED)")
    ok(fleet, "node", "uncordon", "idle")
    ok(fleet, "node", "uncordon", "idle", said="Ok: node idle already uncordoned (state READY)")
    described = json.loads(herd("node", "describe", "idle", "-o", "json", server=fleet.url,
                                check=True).stdout)
    assert described["intent"] == "ELIGIBLE" and described["schedulable"]

    # an idle node drains at once; undrain needs the health check, which it passes
    ok(fleet, "node", "drain", "idle", "-m", "kernel upgrade")
    wait_until(lambda: fleet.state("idle") == "DRAINED", what="idle DRAINED")
    ok(fleet, "node", "undrain", "idle")
    assert fleet.state("idle") == "READY"

    # a busy node stays DRAINING; losing heartbeats and recovering keeps it DRAINING
    ok(fleet, "node", "drain", "busy", "--deadline", "30m")
    assert fleet.state("busy") == "DRAINING"
    busy.send_signal(signal.SIGSTOP)
    wait_until(lambda: fleet.state("busy") == "DEGRADED", timeout=10, what="DEGRADED")
    assert fleet.nodes()["busy"]["intent"] == "DRAINING"
    busy.send_signal(signal.SIGCONT)
    wait_until(lambda: fleet.state("busy") == "DRAINING", timeout=10, what="DRAINING again")

    # urgent drain and disable ask; without a terminal they need --yes
    assert "--yes" in refused(fleet, "node", "disable", "idle", code=2)
    ok(fleet, "node", "disable", "idle", "--yes", "-m", "bad PSU")
    assert fleet.state("idle") == "DOWN"
    assert fleet.nodes()["idle"]["intent"] == "DISABLED"
    ok(fleet, "node", "disable", "idle", "--yes",
       said="Ok: node idle already disabled (state DOWN)")
    ok(fleet, "node", "enable", "busy", said="Ok: node busy already enabled (state DRAINING)")
    ok(fleet, "node", "enable", "idle", "-m", "PSU swapped")
    assert fleet.state("idle") == "READY"
    assert "reboot takes a DOWN or FAILED node" in refused(fleet, "node", "reboot", "idle")

    # a declared node is UNKNOWN until an agent starts on it
    ok(fleet, "node", "add", "rack7-gpu3", "--class", "borrowed")
    assert fleet.state("rack7-gpu3") == "UNKNOWN"
    unknown = herd("node", "list", "--filter-state", "unknown", "-o", "json", server=fleet.url,
                   check=True)
    assert [n["id"] for n in json.loads(unknown.stdout)] == ["rack7-gpu3"]
    assert "already exists" in refused(fleet, "node", "add", "rack7-gpu3")
    fleet.agent("rack7-gpu3")
    wait_until(lambda: fleet.state("rack7-gpu3") == "READY", what="declared node booted")

    # a command on a node that stopped heartbeating warns
    busy.send_signal(signal.SIGKILL)
    busy.wait()
    wait_until(lambda: fleet.state("busy") == "DEGRADED", timeout=10, what="busy DEGRADED")
    assert ok(fleet, "node", "cordon", "rack7-gpu3") == ""
    assert "Warning: node busy last heartbeated" in ok(fleet, "node", "disable", "busy", "--yes")
