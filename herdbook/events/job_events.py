"""Jobs (aggregate ``job``): the YAML job spec and the job events."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

import msgspec
from msgspec import Meta

from herdbook.events.base import Event
from herdbook.events.decode_errors import error_path
from herdbook.events.states import NodeClass
from herdbook.events.subjects import ID_PATTERN

# The spec's rules are Meta constraints on its fields, so that the decoder enforces them and
# the HTTP API's OpenAPI document (``web/openapi.py``) states them: one rule, one place.
# The text bounds came later (issue 26): a spec stored before them with a longer command
# or label would be refused when read (the projector dead-letters it, with a WARNING).
RequeuePolicy = Literal["never", "on_node_failure", "always"]
REQUEUE_POLICIES: tuple[str, ...] = get_args(RequeuePolicy)
MAX_COUNT = 100_000
MAX_COMMAND_ARGS = 128
MAX_COMMAND_ARG = 1024
"""The most arguments of a job's command, and characters of one. A spec is stored on its
``job.registered`` and its command on every ``alloc.placed``: at these bounds even a
command of control characters (6 bytes each in JSON) and the most labels fit a NATS
message (1 MiB). A longer script belongs in a file the command runs."""
MAX_LABELS = 64
MAX_LABEL_KEY = 128
MAX_LABEL_VALUE = 256
"""A constraint's labels: as many, and as long, as an operator may set on a node."""

CommandArg = Annotated[str, Meta(max_length=MAX_COMMAND_ARG)]
ConstraintLabels = Annotated[
    dict[Annotated[str, Meta(max_length=MAX_LABEL_KEY)],
         Annotated[str, Meta(max_length=MAX_LABEL_VALUE)]],
    Meta(max_length=MAX_LABELS, description=f"at most {MAX_LABELS} labels, keys of at most "
         f"{MAX_LABEL_KEY} and values of at most {MAX_LABEL_VALUE} characters")]


class Resources(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cpu: Annotated[float, Meta(gt=0)] = 1.0
    memory_mb: Annotated[int, Meta(ge=0)] = 256
    gpus: Annotated[int, Meta(ge=0)] = 0


class Constraints(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    labels: ConstraintLabels = msgspec.field(default_factory=dict)
    node_class: NodeClass | None = msgspec.field(default=None, name="class")


class Requeue(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    policy: RequeuePolicy = "on_node_failure"
    max_requeue: int = 3


class JobSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: Annotated[str, Meta(pattern=ID_PATTERN.pattern,
                            description="1-128 characters from A-Z a-z 0-9 _ -")]
    command: Annotated[list[CommandArg], Meta(
        min_length=1, max_length=MAX_COMMAND_ARGS,
        description=f"1 to {MAX_COMMAND_ARGS} arguments of at most {MAX_COMMAND_ARG} "
                    "characters each")]
    """Run by the exec driver, e.g. ["python", "train.py"]."""
    count: Annotated[int, Meta(ge=1, le=MAX_COUNT)] = 1
    priority: Annotated[int, Meta(ge=1, le=100)] = 50
    resources: Resources = Resources()
    constraints: Constraints = Constraints()
    requeue: Requeue = Requeue()


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
    return check_job_spec(spec, source)


def check_job_spec(spec: JobSpec, source: str = "job") -> JobSpec:
    """What the decoder's constraints cannot say: an id of exactly one subject token (a
    ``$`` in a pattern also matches before a final newline)."""
    if not ID_PATTERN.fullmatch(spec.id):
        raise JobSpecError(f"{source}: id: use 1-128 characters from A-Z a-z 0-9 _ -")
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
