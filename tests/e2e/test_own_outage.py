"""The control plane's own outage is no evidence against the fleet (DESIGN §9, issue 14
item 3): a real `herd up` stopped (SIGTERM, then started again) or paused (SIGSTOP,
SIGCONT) for longer than heartbeat timeout + grace, while real agents keep running,
declares none of them DEGRADED, RECOVERED or DOWN; a node whose agent really stopped is
still declared DEGRADED one timeout after the start, and DOWN a grace period later."""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TIMEOUT, GRACE = 2.0, 1.5   # the agents beat every 0.2s and reconnect within ~1s
CONFIG = (f"lifecycle: {{heartbeat_timeout: {TIMEOUT}s, "
          f"grace_period: {{standard: {GRACE}s}}}}\n")
LIVE = ["live-1", "live-2", "live-3"]
LIVENESS = ("node.degraded", "node.recovered", "node.down")


def events_since(fleet: Fleet, seq: int) -> list[dict[str, object]]:
    out = herd("events", "tail", "-o", "json", "--subject", "herd.node.>", "--since",
               str(seq), server=fleet.url, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def last_seq(fleet: Fleet) -> int:
    events = events_since(fleet, 1)
    return int(events[-1]["seq"]) if events else 0  # type: ignore[call-overload]


def liveness_of(events: list[dict[str, object]], node_ids: list[str]) -> list[str]:
    return [f"{e['node_id']}:{e['type']}" for e in events
            if e["type"] in LIVENESS and e["node_id"] in node_ids]


def at(event: dict[str, object]) -> float:
    return datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00")).timestamp()


def all_ready(fleet: Fleet, node_ids: list[str]) -> bool:
    nodes = fleet.nodes()
    return all(nodes.get(n, {}).get("state") == "READY" for n in node_ids)


def test_a_restart_after_an_outage_longer_than_timeout_and_grace_declares_no_live_node(
        fleet: Fleet) -> None:
    # given a fleet of READY nodes (auto-approved) under a running `herd up`
    fleet.up(CONFIG + "approval: {auto_approve: true}\n")
    for node_id in [*LIVE, "dead"]:
        fleet.agent(node_id)
    wait_until(lambda: all_ready(fleet, [*LIVE, "dead"]), timeout=30, what="all READY")
    before = last_seq(fleet)
    # when `herd up` stops (its embedded NATS with it) for 5s > timeout + grace, and one
    # agent stops meanwhile while the others keep running, reconnecting
    fleet.procs["up"].send_signal(signal.SIGTERM)
    fleet.procs["up"].wait(15)
    fleet.procs["dead"].send_signal(signal.SIGTERM)
    fleet.procs["dead"].wait(15)
    time.sleep(5.0)
    started = time.time()
    fleet.up(CONFIG + "approval: {auto_approve: true}\n")
    answering = time.time()
    wait_until(lambda: fleet.state("dead") == "DOWN", timeout=20, what="dead DOWN")
    time.sleep(3 * TIMEOUT)
    events = events_since(fleet, before + 1)
    # then the live nodes have no liveness event at all, and are READY
    assert liveness_of(events, LIVE) == []
    assert all_ready(fleet, LIVE)
    # and the dead node is DEGRADED no earlier than start + timeout, DOWN a grace later
    assert liveness_of(events, ["dead"]) == ["dead:node.degraded", "dead:node.down"]
    degraded, down = (e for e in events if e["node_id"] == "dead" and e["type"] in LIVENESS)
    assert started + TIMEOUT <= at(degraded) <= answering + TIMEOUT + 1.5, \
        (started, answering, degraded)
    assert GRACE - 0.3 <= at(down) - at(degraded) <= GRACE + 1.5, (degraded, down)


def test_a_paused_control_plane_declares_no_live_node(fleet: Fleet) -> None:
    # given a fleet of READY nodes under a running `herd up`
    up = fleet.up(CONFIG + "approval: {auto_approve: true}\n")
    for node_id in LIVE:
        fleet.agent(node_id)
    wait_until(lambda: all_ready(fleet, LIVE), timeout=30, what="all READY")
    before = last_seq(fleet)
    # when the `herd up` process (not its NATS server) is stopped for 6s, longer than
    # timeout + grace and than the jump threshold, while the agents keep heartbeating
    up.send_signal(signal.SIGSTOP)
    try:
        time.sleep(6.0)
    finally:
        up.send_signal(signal.SIGCONT)
    time.sleep(3 * (TIMEOUT + GRACE))
    # then no node has a liveness event, and all are READY
    assert liveness_of(events_since(fleet, before + 1), LIVE) == []
    assert all_ready(fleet, LIVE)
    assert "woke" in (fleet.tmp / "up.log").read_text()   # it said why it re-observed
