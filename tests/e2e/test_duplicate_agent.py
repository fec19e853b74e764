"""One node id, one live agent (issue 26 item 1, DESIGN §9): a second `herd agent` for a
node a live agent holds is refused with one line naming the holder, and the node stays
READY with its labels; once the holder is gone for the heartbeat timeout, a newcomer
takes the node over and keeps its labels. Real `herd up`, real agents."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import pytest

from tests.conftest import wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e


def newcomer(fleet: Fleet, name: str, state_dir: str, *extra: str) -> subprocess.Popen[bytes]:
    return fleet.spawn(name, "agent", "--server", fleet.url, "--node-id", "gpu-2",
                       "--state-dir", str(fleet.tmp / state_dir), "--fake-gpus", "2",
                       "--heartbeat-interval", "0.2", *extra)


def held_by_first(fleet: Fleet) -> subprocess.Popen[bytes]:
    first = fleet.agent("gpu-2", "--labels", "rack=r1,zone=b")
    wait_until(lambda: fleet.state("gpu-2") == "READY", what="gpu-2 READY")
    return first


def assert_still_held(fleet: Fleet, first: subprocess.Popen[bytes]) -> None:
    """The node kept its live agent: READY through several heartbeat timeouts (1 s), its
    labels whole, the first agent running and named as the node's agent."""
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert fleet.state("gpu-2") == "READY"
        time.sleep(0.25)
    node = fleet.describe("gpu-2")
    assert node["labels"] == {"rack": "r1", "zone": "b"}
    assert f"pid {first.pid}," in str(node["agent"])
    assert node["agent_conflict"] is None
    assert first.poll() is None


def refusal(fleet: Fleet, proc: subprocess.Popen[bytes], name: str) -> str:
    assert proc.wait(30) == 1
    log = (fleet.tmp / f"{name}.log").read_text()
    assert "Traceback" not in log
    errors = [line for line in log.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, log
    return errors[0]


def test_a_second_agent_for_a_live_node_is_refused_naming_the_holder(fleet: Fleet) -> None:
    fleet.up()
    first = held_by_first(fleet)

    # Another machine (another state dir), no labels: what a template started twice does.
    second = newcomer(fleet, "second", "elsewhere")
    line = refusal(fleet, second, "second")
    assert "node gpu-2 is held by a running agent" in line
    assert f"host {socket.gethostname()}, pid {first.pid}, since " in line
    assert_still_held(fleet, first)
    # The holder said a word too.
    assert "another agent" in (fleet.tmp / "gpu-2.log").read_text()

    # The same state dir started twice: its boots are the holder's, still refused.
    twin = newcomer(fleet, "twin", "gpu-2")
    assert f"pid {first.pid}," in refusal(fleet, twin, "twin")
    assert_still_held(fleet, first)


def test_a_dead_holder_is_taken_over_after_the_timeout_with_its_labels(fleet: Fleet) -> None:
    fleet.up()
    first = held_by_first(fleet)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed = time.monotonic()

    second = newcomer(fleet, "second", "elsewhere")
    wait_until(lambda: f"pid {second.pid}," in str(fleet.describe("gpu-2")["agent"]), timeout=30,
               what="the newcomer to announce itself")
    # It waited the holder out: one heartbeat timeout (1 s) of silence, no less.
    assert time.monotonic() - killed >= 1.0
    wait_until(lambda: fleet.state("gpu-2") == "READY", what="gpu-2 READY again")
    node = fleet.describe("gpu-2")
    assert node["labels"] == {"rack": "r1", "zone": "b"}    # kept, though it gave none
    assert second.poll() is None
    assert "taking the node over from host" in (fleet.tmp / "second.log").read_text()


def test_a_restarted_agent_takes_its_node_back_at_once(fleet: Fleet) -> None:
    """Its own last heartbeat is no other holder: no wait for the timeout."""
    fleet.up()
    first = held_by_first(fleet)
    first.send_signal(signal.SIGKILL)
    first.wait()
    again = fleet.agent("gpu-2", "--labels", "rack=r1,zone=b")
    wait_until(lambda: f"pid {again.pid}," in str(fleet.describe("gpu-2")["agent"]), timeout=10,
               what="the restarted agent to announce itself")
    assert "watching it" not in (fleet.tmp / "gpu-2.log").read_text()
    assert os.path.exists(fleet.tmp / "gpu-2" / "boots.json")
