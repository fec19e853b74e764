"""Job specs: parsed with their defaults, refused with the key path and reason."""

from __future__ import annotations

import pytest

from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpecError, parse_job_spec
from herdbook.projector.job_view import apply_job


def test_a_minimal_spec_gets_the_defaults() -> None:
    spec = parse_job_spec("id: hello\ncommand: [echo, hi]\n")
    assert (spec.count, spec.priority, spec.requeue.policy, spec.requeue.max_requeue) == (
        1, 50, "on_node_failure", 3)
    assert spec.resources.gpus == 0 and spec.constraints.node_class is None


@pytest.mark.parametrize(("text", "message"), [
    ("command: [a]\n", "missing required field `id`"),
    ("id: a.b\ncommand: [a]\n", "id:"),
    ("id: x\ncommand: []\n", "command: Expected `array` of length >= 1"),
    ("id: x\ncommand: [a]\ncount: 0\n", "count:"),
    ("id: x\ncommand: [a]\npriority: 101\n", "priority:"),
    ("id: x\ncommand: [a]\nrequeue: {policy: sometimes}\n", "requeue.policy"),
    ("id: x\ncommand: [a]\nresources: {gpus: -1}\n", "resources.gpus: Expected `int` >= 0"),
    ("id: x\ncommand: [a]\nconstraints: {class: gold}\n", "constraints.class"),
    ("id: x\ncommand: [a]\nresources: {gpu: 1}\n", "resources: Object contains unknown field"),
    ("id: x\ncommand: [a\n", "not valid YAML"),
])
def test_bad_specs_are_refused_with_the_path(text: str, message: str) -> None:
    with pytest.raises(JobSpecError, match=message.replace("[", r"\[")):
        parse_job_spec(text)


def test_a_job_view_counts_versions_and_stops() -> None:
    spec = parse_job_spec("id: hello\ncommand: [echo]\n")
    view = apply_job(None, JobRegistered(job_id="hello", spec=spec), 1)
    view = apply_job(view, JobRegistered(job_id="hello", spec=spec), 2)
    assert view is not None and view.job_version == 2 and view.status == "running"
    view = apply_job(view, JobDeregistered(job_id="hello", reason="done"), 3)
    assert view is not None and view.status == "dead" and view.stop_reason == "done"
