"""Jobs, evaluations and allocations end to end: a real `herd up`, real `herd agent`
processes running real workloads, and the CLI."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import alive, herd, wait_until
from tests.e2e.conftest import JOBS_CONFIG, Fleet

pytestmark = pytest.mark.e2e

JOB = """\
id: train
count: 6
priority: 70
command: ["sleep", "300"]
resources: {cpu: 0.01, memory_mb: 1, gpus: 1}
requeue: {policy: on_node_failure, max_requeue: 3}
"""


def allocs(fleet: Fleet, *args: str) -> list[dict[str, Any]]:
    out = herd("alloc", "list", "-o", "json", *args, server=fleet.url, check=True)
    return list(json.loads(out.stdout))


def running(fleet: Fleet, *args: str) -> list[dict[str, Any]]:
    return [a for a in allocs(fleet, *args) if a["status"] == "running"]


def evals(fleet: Fleet, *args: str) -> list[dict[str, Any]]:
    out = herd("eval", "list", "-o", "json", *args, server=fleet.url, check=True)
    return list(json.loads(out.stdout))


def run_job(fleet: Fleet, tmp: Path, text: str = JOB) -> None:
    spec = tmp / "job.yaml"
    spec.write_text(text)
    ran = herd("job", "run", str(spec), server=fleet.url)
    assert ran.returncode == 0 and ran.stdout.startswith("Ok: job"), ran.stderr


def ready(fleet: Fleet, *node_ids: str) -> None:
    wait_until(lambda: all(fleet.state(n) == "READY" for n in node_ids), timeout=30,
               what=f"{node_ids} READY")


def test_a_job_of_count_6_runs_on_3_agents_and_a_killed_agents_allocations_run_elsewhere(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(JOBS_CONFIG)
    agents = {n: fleet.agent(n) for n in ("a1", "a2", "a3")}
    ready(fleet, *agents)
    run_job(fleet, tmp_path)

    placed = wait_until(lambda: len(r := running(fleet)) == 6 and r, timeout=30,
                        what="6 running allocations")
    assert sorted(a["node_id"] for a in placed) == ["a1", "a1", "a2", "a2", "a3", "a3"]
    for a in placed:
        assert {"id", "job_id", "node_id", "status", "exit_code", "requeue_count"} <= set(a)
        assert alive(a["pid"])
    nodes = fleet.nodes()
    assert [nodes[n]["allocations"] for n in ("a1", "a2", "a3")] == [2, 2, 2]
    [first] = evals(fleet)
    assert (first["triggered_by"], first["status"]) == ("job-register", "complete")
    for key in ("id", "job_id", "previous_eval", "next_eval", "blocked_eval"):
        assert key in first
    status = json.loads(herd("eval", "status", first["id"][:8], "-o", "json",
                             server=fleet.url, check=True).stdout)
    assert [e["id"] for e in status["chain"]] == [first["id"]]

    # a spare node, then a1 dies: DOWN -> its allocations lost -> requeued onto a4
    fleet.agent("a4")
    ready(fleet, "a4")
    victims = {a["id"] for a in placed if a["node_id"] == "a1"}
    agents["a1"].send_signal(signal.SIGKILL)
    agents["a1"].wait()
    wait_until(lambda: fleet.state("a1") == "DOWN", timeout=20, what="a1 DOWN")
    moved = wait_until(lambda: len(r := running(fleet, "--node", "a4")) == 2 and r, timeout=30,
                       what="a1's allocations running on a4")
    assert {a["previous_alloc"] for a in moved} == victims
    assert {a["requeue_count"] for a in moved} == {1}
    lost = [a for a in allocs(fleet, "--node", "a1") if a["id"] in victims]
    assert {a["status"] for a in lost} == {"lost"}
    assert "node-update" in [e["triggered_by"] for e in evals(fleet)]
    assert len(running(fleet, "--job", "train")) == 6

    # job stop: its workloads are stopped
    pids = [a["pid"] for a in running(fleet)]
    assert herd("job", "stop", "train", "-m", "done", server=fleet.url).returncode == 0
    wait_until(lambda: not running(fleet), timeout=20, what="workloads stopped")
    assert "job-deregister" in [e["triggered_by"] for e in evals(fleet)]
    wait_until(lambda: not any(alive(p) for p in pids), timeout=10, what="processes gone")
    # stopped already: done, exit 0, the state in the line (kubectl's "already cordoned")
    again = herd("job", "stop", "train", server=fleet.url)
    assert (again.returncode, again.stdout.strip()) == (
        0, "Ok: job train already stopped (status dead, reason: done)"), again.stderr


def test_a_job_that_cannot_fit_gets_a_blocked_eval_that_completes_when_a_node_is_added(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(JOBS_CONFIG)
    fleet.agent("b1")
    ready(fleet, "b1")
    run_job(fleet, tmp_path, JOB.replace("count: 6", "count: 3"))
    wait_until(lambda: len(running(fleet)) == 2, timeout=30, what="2 of 3 running")
    blocked = wait_until(lambda: evals(fleet, "--status", "blocked"), timeout=10,
                         what="a blocked eval")
    [b] = blocked
    assert b["triggered_by"] == "queued-allocs" and b["previous_eval"]
    first = json.loads(herd("eval", "status", b["previous_eval"], "-o", "json",
                            server=fleet.url, check=True).stdout)
    assert first["eval"]["blocked_eval"] == b["id"]
    assert [e["id"] for e in first["chain"]] == [b["previous_eval"], b["id"]]

    fleet.agent("b2")
    [third] = wait_until(lambda: [a for a in running(fleet) if a["node_id"] == "b2"], timeout=30,
                         what="the third allocation on b2")
    assert third["index"] == 2
    done = json.loads(herd("eval", "status", b["id"], "-o", "json", server=fleet.url,
                           check=True).stdout)["eval"]
    assert done["status"] == "complete"
    retried = herd("eval", "retry", b["id"], server=fleet.url)
    assert retried.returncode != 0 and "only a failed eval can be retried" in retried.stderr


def test_an_agent_restarted_with_sigterm_reattaches_its_running_workloads(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(JOBS_CONFIG)
    agent = fleet.agent("r1")
    ready(fleet, "r1")
    run_job(fleet, tmp_path, JOB.replace("count: 6", "count: 2"))
    before = wait_until(lambda: len(r := running(fleet)) == 2 and r, timeout=30,
                        what="2 running")
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(15) == 0
    state = json.loads((tmp_path / "r1" / "agent-state.json").read_text())
    assert sorted(e["pid"] for e in state["allocs"]) == sorted(a["pid"] for a in before)
    assert all(alive(a["pid"]) for a in before)       # SIGTERM left the workloads running

    fleet.agent("r1")
    after = wait_until(lambda: len(r := [a for a in running(fleet) if a["reattached"]]) == 2
                       and r, timeout=30, what="2 reattached allocations")
    assert sorted((a["id"], a["pid"]) for a in after) == sorted(
        (a["id"], a["pid"]) for a in before)
    assert fleet.state("r1") == "READY"
    assert [e["triggered_by"] for e in evals(fleet)] == ["job-register"]   # nothing moved


def test_an_urgent_drain_sends_the_checkpoint_signal_then_migrates_and_drains(
        fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(JOBS_CONFIG)
    fleet.agent("d1")
    ready(fleet, "d1")
    marks = tmp_path / "marks"
    marks.mkdir()
    script = ("import os, signal, time; "
              f"path = os.path.join({str(marks)!r}, os.environ['HERD_ALLOC_ID']); "
              "signal.signal(signal.SIGUSR1, lambda *a: open(path, 'w').write('checkpoint')); "
              "time.sleep(300)")
    job = JOB.replace("count: 6", "count: 1").replace(
        'command: ["sleep", "300"]', f"command: {json.dumps(['python3', '-c', script])}")
    run_job(fleet, tmp_path, job)
    [old] = wait_until(lambda: running(fleet), timeout=30, what="running")
    fleet.agent("d2")
    ready(fleet, "d2")
    drained = herd("node", "drain", "d1", "--urgent", "--yes", server=fleet.url)
    assert drained.returncode == 0, drained.stderr
    # the checkpoint signal first, a replacement on d2 at once
    wait_until(lambda: (marks / old["id"]).exists(), timeout=15, what="SIGUSR1 checkpoint")
    [new] = wait_until(lambda: running(fleet, "--node", "d2"), timeout=30, what="migrated")
    assert new["previous_alloc"] == old["id"] and new["requeue_count"] == 0
    # then, after the grace period, the old one is stopped and the node is DRAINED
    wait_until(lambda: fleet.state("d1") == "DRAINED", timeout=30, what="d1 DRAINED")
    [stopped] = [a for a in allocs(fleet) if a["id"] == old["id"]]
    assert stopped["status"] == "stopped" and not alive(old["pid"])
    assert "node-drain" in [e["triggered_by"] for e in evals(fleet)]


def test_job_and_alloc_commands_refuse_bad_input(fleet: Fleet, tmp_path: Path) -> None:
    fleet.up(JOBS_CONFIG)
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ncommand: [a]\nrequeue: {policy: sometimes}\n")
    refused = herd("job", "run", str(bad), server=fleet.url)
    assert refused.returncode == 2 and "requeue.policy" in refused.stderr
    assert herd("eval", "list", "--status", "sleepy", server=fleet.url).returncode == 2
    assert herd("alloc", "list", "--status", "sleepy", server=fleet.url).returncode == 2
    assert herd("alloc", "list", "--node", "bad/id", server=fleet.url).returncode == 2
    missing = herd("alloc", "status", "nope", server=fleet.url)
    assert missing.returncode != 0 and "not found" in missing.stderr
    assert herd("job", "status", "nope", server=fleet.url).returncode != 0
    top = herd("top", "--once", server=fleet.url)
    assert top.returncode == 0 and "nodes by state" in top.stdout, top.stderr
