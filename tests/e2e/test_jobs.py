"""Jobs and evaluations through the CLI (the scheduler that moves evals comes next)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import herd
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

JOB = """\
id: train
count: 6
priority: 70
command: ["sleep", "300"]
resources: {cpu: 1, memory_mb: 512, gpus: 1}
constraints: {class: standard, labels: {team: ml}}
requeue: {policy: on_node_failure, max_requeue: 3}
"""


def test_a_job_registers_with_a_pending_job_register_eval(fleet: Fleet, tmp_path: Path) -> None:
    fleet.up()
    spec = tmp_path / "train.yaml"
    spec.write_text(JOB)
    ran = herd("job", "run", str(spec), server=fleet.url)
    assert ran.returncode == 0 and ran.stdout.startswith("Ok: job train registered"), ran.stderr

    evals = json.loads(herd("eval", "list", "-o", "json", server=fleet.url, check=True).stdout)
    [first] = evals
    assert first["job_id"] == "train" and first["status"] == "pending"
    assert first["triggered_by"] == "job-register"
    for key in ("id", "previous_eval", "next_eval", "blocked_eval"):
        assert key in first
    status = json.loads(herd("eval", "status", first["id"][:8], "-o", "json",
                             server=fleet.url, check=True).stdout)
    assert [e["id"] for e in status["chain"]] == [first["id"]]

    job = json.loads(herd("job", "status", "train", "-o", "json", server=fleet.url,
                          check=True).stdout)
    assert job["count"] == 6 and job["status"] == "running" and job["resources"]["gpus"] == 1

    assert herd("job", "stop", "train", "-m", "done", server=fleet.url).returncode == 0
    assert "already stopped" in herd("job", "stop", "train", server=fleet.url).stderr
    triggers = [e["triggered_by"] for e in json.loads(herd(
        "eval", "list", "-o", "json", "--job", "train", server=fleet.url, check=True).stdout)]
    assert triggers == ["job-register", "job-deregister"]
    pending = herd("eval", "list", "--status", "pending", "-o", "json", server=fleet.url,
                   check=True)
    assert len(json.loads(pending.stdout)) == 2

    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ncommand: [a]\nrequeue: {policy: sometimes}\n")
    refused = herd("job", "run", str(bad), server=fleet.url)
    assert refused.returncode == 2 and "requeue.policy" in refused.stderr
    assert herd("eval", "list", "--status", "sleepy", server=fleet.url).returncode == 2
