"""Pools with the local provider: real `herd agent` processes started by the control
plane, auto-replacement of an unhealthy node, and the registration timeout."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle: {heartbeat_timeout: 2s, grace_period: {standard: 30s}}
approval: {auto_approve: true}
instance_manager: {registration_timeout: 3s, reconcile_interval: 300ms,
                   stale_check_interval: 500ms}
pools:
  train:
    provider: local
    min_nodes: 3
    max_nodes: 5
    fake_gpus: 4
    heartbeat_interval: 500ms
    labels: {team: ml}
    health: {auto_replace: true}
    cooldown: 1m
  broken:
    provider: local
    min_nodes: 1
    max_nodes: 1
    agent_command: ["sleep", "600"]
  unstartable:
    provider: local
    min_nodes: 1
    max_nodes: 1
    agent_command: ["/nonexistent/herd-agent"]
"""


def instances(fleet: Fleet) -> list[dict[str, object]]:
    out = herd("instance", "list", "-o", "json", server=fleet.url)
    return json.loads(out.stdout) if out.returncode == 0 else []


@pytest.fixture
def pool_fleet(fleet: Fleet) -> Iterator[Fleet]:
    yield fleet
    # local instances outlive the control plane, as cloud instances do: stop them here
    for inst in instances(fleet) if fleet.procs["up"].poll() is None else []:
        ref = str(inst["provider_ref"])
        if ref.startswith("pid:"):
            try:
                os.killpg(int(ref[4:]), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_pool_keeps_three_agents_and_replaces_an_unhealthy_one(pool_fleet: Fleet,
                                                                  tmp_path: Path) -> None:
    fleet = pool_fleet
    fleet.up(CONFIG)

    def running(pool: str) -> list[dict[str, object]]:
        return [i for i in instances(fleet) if i["pool"] == pool and i["state"] == "RUNNING"]

    wait_until(lambda: len(running("train")) == 3, timeout=60, what="3 RUNNING instances")
    nodes = fleet.nodes()
    train = [i["node_id"] for i in running("train")]
    assert all(nodes[n]["state"] == "READY" and nodes[n]["labels"]["team"] == "ml"
               for n in train)

    # an instance whose agent never starts: FAILED after the registration timeout
    [failed, *_] = wait_until(lambda: [i for i in instances(fleet) if i["pool"] == "broken"
                                        and i["state"] == "FAILED"],
                              timeout=30, what="broken FAILED")
    assert "no registration within 3s" in str(failed["reason"])

    # a provider error is an event with its reason, and the instance goes FAILED
    [unstartable, *_] = wait_until(lambda: [i for i in instances(fleet)
                                            if i["pool"] == "unstartable"
                                            and i["state"] == "FAILED"], what="provider error")
    assert "provisioning failed: cannot start /nonexistent/herd-agent" in str(
        unstartable["reason"])
    assert unstartable["errors"] and "provision:" in str(unstartable["errors"])

    # a fatal XID on one node: replaced, the old record stays TERMINATED
    victim = str(train[0])
    result = herd("agent", "inject", "--node", victim, "xid", "79", server=fleet.url)
    assert result.returncode == 0, result.stderr
    wait_until(lambda: fleet.nodes()[victim]["state"] == "TERMINATED", timeout=30,
               what="victim TERMINATED")
    wait_until(lambda: len(running("train")) == 3 and victim not in
               [i["node_id"] for i in running("train")], timeout=60, what="replacement")
    replacement = next(i for i in instances(fleet) if i.get("replaces") == victim)
    assert replacement["state"] == "RUNNING"

    status = json.loads(herd("pool", "status", "train", "-o", "json", server=fleet.url,
                             check=True).stdout)
    assert status["live"] == 3 and status["instances"]["TERMINATED"] == 1

    # scale up within bounds; outside them is refused
    assert herd("pool", "scale", "train", "4", server=fleet.url).returncode == 0
    wait_until(lambda: len(running("train")) == 4, timeout=60, what="4 RUNNING")
    again = herd("pool", "scale", "train", "4", server=fleet.url)   # done: exit 0, no event
    assert (again.returncode, again.stdout.strip()) == (
        0, "Ok: pool train already scaled to 4"), again.stderr
    refused = herd("pool", "scale", "train", "9", server=fleet.url)
    assert refused.returncode == 1 and "3 to 5" in refused.stderr
