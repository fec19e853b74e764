"""Job specs: parsed with their defaults, refused with the key path and reason."""

from __future__ import annotations

import msgspec
import pytest

from herdbook.api.lookup import decode
from herdbook.api.messages import ErrorCode, RegisterJob
from herdbook.api.service import failure
from herdbook.events.alloc import AllocPlaced
from herdbook.events.codec import encode
from herdbook.events.job_events import (
    MAX_COMMAND_ARG,
    MAX_COMMAND_ARGS,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    JobDeregistered,
    JobRegistered,
    JobSpecError,
    parse_job_spec,
)
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


def _spec(command: list[str], labels: dict[str, str] | None = None) -> str:
    return msgspec.json.encode({"id": "x", "command": command,
                                "constraints": {"labels": labels or {}}}).decode()


@pytest.mark.parametrize(("command", "labels", "path"), [
    (["a" * (MAX_COMMAND_ARG + 1)], None,
     f"command[0]: Expected `str` of length <= {MAX_COMMAND_ARG}"),
    (["a"] * (MAX_COMMAND_ARGS + 1), None,
     f"command: Expected `array` of length <= {MAX_COMMAND_ARGS}"),
    (["a"], {f"k{i}": "v" for i in range(MAX_LABELS + 1)},
     f"constraints.labels: Expected `object` of length <= {MAX_LABELS}"),
    (["a"], {"k" * (MAX_LABEL_KEY + 1): "v"},
     f"constraints.labels (key): Expected `str` of length <= {MAX_LABEL_KEY}"),
    (["a"], {"k": "v" * (MAX_LABEL_VALUE + 1)},
     f"constraints.labels[...]: Expected `str` of length <= {MAX_LABEL_VALUE}"),
])
def test_a_specs_text_is_bounded_and_refused_in_one_line(
        command: list[str], labels: dict[str, str] | None, path: str) -> None:
    """Issue 26 item 5: above a bound the CLI says so in one line (exit 2) and the API
    answers bad_request (HTTP 400); nothing is sent or appended."""
    with pytest.raises(JobSpecError) as err:
        parse_job_spec(_spec(command, labels), "job.yaml")
    assert str(err.value) == f"job.yaml: {path}" and "\n" not in str(err.value)
    body = msgspec.json.encode({"spec": msgspec.json.decode(_spec(command, labels))})
    with pytest.raises(msgspec.ValidationError) as invalid:
        decode(body, RegisterJob)
    assert failure(invalid.value, "herd.api.job.register").code is ErrorCode.BAD_REQUEST


def test_a_spec_at_every_bound_is_taken_and_fits_a_nats_message() -> None:
    """The worst case: every argument and label at its bound, of control characters that
    JSON writes as 6 bytes each; the job's event and an allocation's both fit 1 MiB."""
    worst = "\x01" * MAX_COMMAND_ARG
    labels = {f"{i:03d}" + "\x01" * (MAX_LABEL_KEY - 3): "\x01" * MAX_LABEL_VALUE
              for i in range(MAX_LABELS)}
    spec = parse_job_spec(_spec([worst] * MAX_COMMAND_ARGS, labels))
    assert len(spec.command) == MAX_COMMAND_ARGS and len(spec.constraints.labels) == MAX_LABELS
    registered = encode(JobRegistered(job_id="x" * 128, spec=spec, actor="a" * 128))
    placed = encode(AllocPlaced(node_id="n" * 128, alloc_id="a" * 128, job_id="x" * 128,
                                eval_id="e" * 128, index=0, command=list(spec.command)))
    assert max(len(registered), len(placed)) < 1024 * 1024
