"""Many nodes at once, end to end: a real `herd up --demo N` and the real CLI acting on
several ids and on selections by label, state and approval."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

DEMO = ["demo-000", "demo-001", "demo-002", "demo-003"]
"""`herd up --demo 4`: labels demo=true and rack=r0..r3."""


def approvals(fleet: Fleet) -> dict[str, object]:
    return {n: v["approval"] for n, v in fleet.nodes().items() if n.startswith("demo-")}


def test_demo_fleet_with_auto_approve_takes_jobs(fleet: Fleet, tmp_path: Path) -> None:
    up = fleet.up("{}\n", "--demo", "3", "--auto-approve")
    wait_until(lambda: set(approvals(fleet).values()) == {"APPROVED"}
               and len(approvals(fleet)) == 3, what="demo fleet approved")
    wait_until(lambda: all(fleet.state(n) == "READY" for n in DEMO[:3]), what="READY")
    job = tmp_path / "job.yaml"
    job.write_text('id: hello\ncount: 3\ncommand: ["true"]\n'
                   "resources: {cpu: 0.01, memory_mb: 1, gpus: 1}\n")
    assert herd("job", "run", str(job), server=fleet.url).returncode == 0

    def complete() -> list[str]:
        out = herd("alloc", "list", "-o", "json", server=fleet.url, check=True).stdout
        return [a["node_id"] for a in json.loads(out) if a["status"] == "complete"]

    assert set(wait_until(lambda: len(complete()) == 3 and complete(),
                          what="3 allocations complete")) <= set(DEMO)
    up.terminate()
    up.wait(15)
    assert "approved as they register" in (fleet.tmp / "up.log").read_text()


def test_commands_over_many_nodes(fleet: Fleet) -> None:
    fleet.up("{}\n", "--demo", "4")
    wait_until(lambda: len(approvals(fleet)) == 4, what="4 demo nodes")
    assert set(approvals(fleet).values()) == {"PENDING"}
    log = (fleet.tmp / "up.log").read_text()
    assert "PENDING until approved" in log and "node approve -l demo=true" in log

    # a selection by label and approval: one line per node and a summary, exit 0
    approved = herd("node", "approve", "-l", "demo=true", "--filter-approval", "pending",
                    "-m", "demo", server=fleet.url)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines() == [
        *(f"{n}: approved, now READY" for n in DEMO), "approve: 4 of 4 nodes done"]
    assert set(approvals(fleet).values()) == {"APPROVED"}

    # several ids, one already cordoned: done too (kubectl's "already cordoned"), exit 0
    cordon = herd("node", "cordon", "demo-001", "demo-002", server=fleet.url)
    assert cordon.returncode == 0 and cordon.stdout.splitlines()[-1] == \
        "cordon: 2 of 2 nodes done"
    again = herd("node", "cordon", "demo-001", "demo-003", "demo-001", server=fleet.url)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "demo-001: already cordoned (state CORDONED)",
        "demo-003: cordoned, now CORDONED", "cordon: 2 of 2 nodes done"]
    # one refused: every node's line, exit 1
    undrain = herd("node", "undrain", "demo-000", "demo-001", server=fleet.url)
    assert undrain.returncode == 1
    assert undrain.stdout.splitlines() == [
        "demo-000: already undrained (state READY)",
        "demo-001: refused: cannot undrain node demo-001: it is CORDONED (state CORDONED)",
        "undrain: 1 of 2 nodes done, 1 refused"]

    # a selection by state as `node list` shows it; the control plane's node is not in it
    uncordon = herd("node", "uncordon", "--filter-state", "cordoned", server=fleet.url)
    assert uncordon.returncode == 0, uncordon.stderr
    assert uncordon.stdout.splitlines()[-1] == "uncordon: 3 of 3 nodes done"
    cordon_rack = herd("node", "cordon", "-l", "rack=r2,demo=true", server=fleet.url)
    assert cordon_rack.stdout.splitlines() == ["demo-002: cordoned, now CORDONED",
                                               "cordon: 1 of 1 nodes done"]
    ready = herd("node", "list", "--filter-state", "ready", "-o", "json", server=fleet.url,
                 check=True)
    assert "cp-1" in {n["id"] for n in json.loads(ready.stdout)}
    drained = herd("node", "drain", "--filter-state", "ready", server=fleet.url)
    assert drained.returncode == 0, drained.stderr
    assert "cp-1" not in drained.stdout and drained.stdout.count("drain started") == 3

    # a selection that matches nothing: one line, a usage error, nothing sent
    none = herd("node", "cordon", "-l", "rack=r9", server=fleet.url)
    assert (none.returncode, none.stdout) == (2, "")
    assert none.stderr == "Error: no node matches -l rack=r9\n"

    # disable asks once for all the nodes; without a terminal that is --yes
    refused = herd("node", "disable", "-l", "demo=true", server=fleet.url)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "Disable 4 nodes (demo-000, demo-001, demo-002, demo-003)?" in refused.stderr
    assert "--yes" in refused.stderr
    started = time.monotonic()
    disabled = herd("node", "disable", "-l", "demo=true", "--yes", server=fleet.url)
    assert disabled.returncode == 0, disabled.stderr
    assert disabled.stdout.splitlines()[-1] == "disable: 4 of 4 nodes done"
    assert time.monotonic() - started < 10
    wait_until(lambda: all(fleet.state(n) == "DOWN" for n in DEMO), what="all DOWN")
    enabled = herd("node", "enable", *DEMO, server=fleet.url)
    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stdout.splitlines()[-1] == "enable: 4 of 4 nodes done"

    # one id keeps the one-node output
    single = herd("node", "cordon", "demo-000", server=fleet.url)
    assert (single.returncode, single.stdout) == (0, "Ok\n")
