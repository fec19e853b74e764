"""Jobs (aggregate ``job``): the YAML job spec and the job events."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from herdbook.events.base import Event
from herdbook.events.errors import error_path
from herdbook.events.subjects import ID_PATTERN


class Resources(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cpu: float = 1.0
    memory_mb: int = 256
    gpus: int = 0


class Constraints(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    node_class: str | None = msgspec.field(default=None, name="class")


class Requeue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy: str = "on_node_failure"
    """never | on_node_failure | always"""
    max_requeue: int = 3


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    command: list[str]
    """Run by the exec driver, e.g. ["python", "train.py"]."""
    count: int = 1
    priority: int = 50
    resources: Resources = Resources()
    constraints: Constraints = Constraints()
    requeue: Requeue = Requeue()


REQUEUE_POLICIES = ("never", "on_node_failure", "always")


class JobSpecError(ValueError):
    pass


MAX_NESTING = 32
"""How deeply a job spec's brackets may nest: a spec needs 3 (constraints.labels); the
YAML parser recurses per level and a 50k-deep ``[[[…`` crashed the process."""


def flow_nesting(text: str) -> int:
    """The deepest nesting of flow brackets (``[`` ``{``) outside quotes and comments."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return 0   # cannot be deeper: no scan
    deepest = depth = 0
    quote = ""
    comment = False
    previous = "\n"
    for char in text:
        if comment:
            comment = char != "\n"
        elif quote:
            if char == quote and not (quote == '"' and previous == "\\"):
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#" and previous in " \t\n":
            comment = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
        previous = "" if previous == "\\" and char == "\\" else char
    return deepest


def parse_job_spec(text: bytes | str, source: str = "job") -> JobSpec:
    """Decode and check a job spec; a bad one is refused with the key path and reason."""
    import msgspec.yaml

    shown = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if (deepest := flow_nesting(shown)) > MAX_NESTING:
        raise JobSpecError(f"{source}: nested {deepest} levels deep; a job spec nests at "
                           f"most {MAX_NESTING}")
    try:
        spec = msgspec.yaml.decode(text, type=JobSpec)
    except msgspec.ValidationError as err:
        raise JobSpecError(f"{source}: {error_path(str(err))}") from err
    except msgspec.DecodeError as err:
        raise JobSpecError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from err
    problems = []
    if not ID_PATTERN.fullmatch(spec.id):
        problems.append("id: use 1-128 characters from A-Z a-z 0-9 _ -")
    if not spec.command:
        problems.append("command: must not be empty")
    if not 1 <= spec.count <= 100_000:
        problems.append("count: must be between 1 and 100000")
    if not 1 <= spec.priority <= 100:
        problems.append("priority: must be between 1 and 100")
    if spec.requeue.policy not in REQUEUE_POLICIES:
        problems.append(f"requeue.policy: {spec.requeue.policy!r} is not one of "
                        + ", ".join(REQUEUE_POLICIES))
    if spec.resources.gpus < 0 or spec.resources.cpu <= 0 or spec.resources.memory_mb < 0:
        problems.append("resources: cpu must be > 0, memory_mb and gpus >= 0")
    if spec.constraints.node_class not in (None, "standard", "sensitive", "borrowed"):
        problems.append("constraints.class: not one of standard, sensitive, borrowed")
    if problems:
        raise JobSpecError(f"{source}: {problems[0]}")
    return spec


class JobEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "job"

    job_id: str

    @property
    def aggregate_id(self) -> str:
        return self.job_id


class JobRegistered(JobEvent, frozen=True, kw_only=True, tag="job.registered"):
    spec: JobSpec
    version: int = 1


class JobDeregistered(JobEvent, frozen=True, kw_only=True, tag="job.deregistered"):
    reason: str = ""
