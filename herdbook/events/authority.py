"""The subject is the authority (DESIGN §9): which event types each subject family may
carry, who may publish them, and the one check every reader of a stream applies.

NATS authenticates who may publish on a subject and nothing in the body. So a reader
accepts an event only if

- its subject belongs to a family of this table,
- its type is one that family may carry,
- the subject it would be appended on (``subject_of``) is exactly the subject it was
  stored on: the type and every id the subject names (node, alloc, job, eval, instance,
  pool) are the body's, and
- every id in the body is a valid id (the CLI would accept it).

Anything else is a ``Unvouched`` with its reason: the projector dead-letters it, reactors
and agents skip it. The NATS permissions ``herd creds`` writes are generated from the
same table (``agent_publish_subjects``), so what an agent may publish and what a reader
accepts from it cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from operator import attrgetter
from typing import Any, NamedTuple

import msgspec

from herdbook.events import codec
from herdbook.events.alloc import (
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocRunning,
    AllocStopped,
)
from herdbook.events.base import Event
from herdbook.events.breaker_events import BreakerEvent
from herdbook.events.eval_events import EvalEvent
from herdbook.events.hb_shards import shard_in_subject
from herdbook.events.health_report import HealthReport
from herdbook.events.heartbeat import Heartbeat, NodeResources
from herdbook.events.instance import InstanceEvent
from herdbook.events.job_events import JobEvent
from herdbook.events.node import (
    NodeBootChecked,
    NodeBootStarted,
    NodeEvent,
    NodeInfoUpdated,
    NodeRegistered,
    NodeWiped,
    NodeWipeFailed,
    NodeWipeStepReported,
)
from herdbook.events.pool import PoolEvent
from herdbook.events.subjects import (
    EVENTS_STREAM,
    HEALTH_STREAM,
    HEARTBEATS_STREAM,
    ID_PATTERN,
    InvalidIdError,
    printable,
    validate_id,
)
from herdbook.events.telemetry import GpuTelemetry


class Publisher(StrEnum):
    AGENT = "agent"
    """The node's own agent, on its own node's subjects only (``herd creds agent``)."""
    CONTROL = "control"
    """The control plane (``herd-control``)."""


class Unvouched(ValueError):
    """A message its subject does not vouch for; ``str()`` is the reason."""


@dataclass(frozen=True)
class Family:
    """Subjects ``herd.<prefix>.<id tokens...>[.<event name>]`` in one stream."""

    prefix: str
    stream: str
    id_tokens: tuple[str, ...]
    """Which id each token after the prefix names, in order."""
    base: type
    """Every type this family may carry is a subclass of ``base``..."""
    agent_types: tuple[type, ...] = ()
    """...and of those, these (and only these) may come from the node's agent."""

    @cached_property
    def carries_events(self) -> bool:   # cached: asked for every message a reader binds
        return issubclass(self.base, Event)

    def agent_subjects(self, node_id: str) -> list[str]:
        """The subjects of this family the agent of ``node_id`` may publish on."""
        ids = ".".join(node_id if token == "node_id" else "*" for token in self.id_tokens)
        if not self.carries_events:
            return [f"herd.{self.prefix}.{ids}"] if self.agent_types else []
        return [f"herd.{self.prefix}.{ids}.{_event_name(cls)}" for cls in self.agent_types]


def _event_name(cls: type) -> str:
    tag = cls.__struct_config__.tag  # type: ignore[attr-defined]
    assert isinstance(tag, str)
    return tag.split(".", 1)[1]


FAMILIES: tuple[Family, ...] = (
    Family("node", EVENTS_STREAM, ("node_id",), NodeEvent, agent_types=(
        NodeRegistered, NodeInfoUpdated, NodeBootStarted, NodeBootChecked,
        NodeWipeStepReported, NodeWiped, NodeWipeFailed)),
    Family("alloc", EVENTS_STREAM, ("node_id", "alloc_id"), AllocEvent, agent_types=(
        AllocRunning, AllocCompleted, AllocFailed, AllocStopped, AllocLost)),
    Family("job", EVENTS_STREAM, ("job_id",), JobEvent),
    Family("eval", EVENTS_STREAM, ("eval_id",), EvalEvent),
    Family("instance", EVENTS_STREAM, ("instance_id",), InstanceEvent),
    Family("pool", EVENTS_STREAM, ("pool",), PoolEvent),
    Family("breaker", EVENTS_STREAM, ("breaker",), BreakerEvent),
    Family("hb", HEARTBEATS_STREAM, ("node_id",), Heartbeat, agent_types=(Heartbeat,)),
    Family("res", HEARTBEATS_STREAM, ("node_id",), NodeResources, agent_types=(NodeResources,)),
    Family("gpu", HEARTBEATS_STREAM, ("node_id",), GpuTelemetry, agent_types=(GpuTelemetry,)),
    Family("health", HEALTH_STREAM, ("node_id",), HealthReport, agent_types=(HealthReport,)),
)
"""Every subject family herdbook stores, what it carries and who may write it. A type
not listed under ``agent_types`` is written by the control plane only; operators write
no stream subject at all (they go through the API)."""

AGENT_SERVED: dict[str, str] = {
    "inject": "a GPU fault into the fake NVML backend (`herd agent inject`)",
    "fingerprint": "recompute the conformance fingerprint (`herd node fingerprint`)",
    "logs": "a workload's output, bounded per reply (`herd alloc logs`, via the control plane)",
}
"""The requests ``herd.agent.<node>.<name>`` an agent answers (no stream): operators and
the control plane may send them, no agent may (``agent_permissions`` names no
``herd.agent.*`` subject to publish), so one node's agent cannot read another's workload
output. ``holder`` is not here: every agent asks it of its own node id only."""


def operator_agent_requests() -> list[str]:
    """The agent requests an operator may publish, for any node."""
    return [f"herd.agent.*.{name}" for name in AGENT_SERVED]


_BY_PREFIX = {family.prefix: family for family in FAMILIES}

ID_FIELDS = ("node_id", "alloc_id", "job_id", "eval_id", "instance_id", "pool", "boot_id",
             "previous_alloc", "previous_eval", "next_eval", "blocked_eval", "replaces",
             "report_id", "breaker")
"""Body fields that hold an id: each must be a valid id (or empty/None where optional)."""


def family_of(subject: str) -> Family | None:
    parts = subject.split(".", 2)
    if len(parts) < 3 or parts[0] != "herd":
        return None
    return _BY_PREFIX.get(parts[1])


def publishers(cls: type) -> frozenset[Publisher]:
    """Who may publish an event of type ``cls`` (the table above, read per type)."""
    for family in FAMILIES:
        if issubclass(cls, family.base):
            if cls in family.agent_types:
                return frozenset({Publisher.AGENT, Publisher.CONTROL})
            return frozenset({Publisher.CONTROL})
    return frozenset()


def agent_publish_subjects(node_id: str) -> list[str]:
    """Every stream subject the agent of ``node_id`` may publish on."""
    nid = validate_id(node_id)
    # The heartbeat as the server's liveness-shard mapping delivers it: nats-server checks
    # a publish permission after mapping (``events.hb_shards``); any shard, since which one
    # is the server's to say, and the reader checks it is the node's own.
    return [subject for family in FAMILIES for subject in family.agent_subjects(nid)] + [
        f"herd.hb.*.{nid}"]


_ID_FIELDS_OF: dict[type, tuple[str, ...]] = {}


def _id_fields(cls: type) -> tuple[str, ...]:
    fields = _ID_FIELDS_OF.get(cls)
    if fields is None:
        names = set(cls.__struct_fields__)  # type: ignore[attr-defined]
        fields = _ID_FIELDS_OF[cls] = tuple(name for name in ID_FIELDS if name in names)
    return fields


_VALID_IDS: set[str] = set()
"""Ids already found valid: a stream names the same nodes over and over, and a set lookup
costs a tenth of the pattern (a fold of 200k events spent ~15 % of its time matching)."""
_VALID_IDS_MAX = 100_000


def check_ids(value: object) -> None:
    """Raise ``Unvouched`` unless every id field of ``value`` is a valid id (or empty)."""
    _check_fields(value, _id_fields(type(value)))


def _check_fields(value: object, names: tuple[str, ...]) -> None:
    for name in names:
        ident = getattr(value, name)
        if not ident or (type(ident) is str and ident in _VALID_IDS):
            continue
        if isinstance(ident, str) and ID_PATTERN.fullmatch(ident):
            if len(_VALID_IDS) >= _VALID_IDS_MAX:
                _VALID_IDS.clear()
            _VALID_IDS.add(ident)
            continue
        try:
            validate_id(ident, name.replace("_", " "))
        except InvalidIdError as err:
            raise Unvouched(str(err)) from None


_SHAPES: dict[type, tuple[str, tuple[str, ...], str]] = {}


def _shape(cls: type) -> tuple[str, tuple[str, ...], str]:
    """(``herd.<prefix>.``, the id fields its subject names in order, ``.<event name>``)."""
    shape = _SHAPES.get(cls)
    if shape is None:
        family = next(f for f in FAMILIES if issubclass(cls, f.base))
        shape = _SHAPES[cls] = (f"herd.{family.prefix}.", family.id_tokens,
                                f".{_event_name(cls)}")
    return shape


def expected_subject(event: Event) -> str:
    """The subject ``event`` is appended on (``EventStore.subject_of``), built without
    validating: ``bind_event`` validates the ids itself."""
    prefix, ids, suffix = _shape(type(event))
    if len(ids) == 1:
        return prefix + str(getattr(event, ids[0])) + suffix
    return prefix + ".".join(getattr(event, attr) for attr in ids) + suffix


def _events_family(subject: str) -> Family:
    family = family_of(subject)
    if family is None or not family.carries_events:
        raise Unvouched(f"subject {printable(subject, 120)!r} carries no domain events")
    return family


class _Bound(NamedTuple):
    """What an event bound to a subject before was: the next one on that subject is
    vouched for by the same checks if it has the same type and names the same ids."""

    type: type
    ids_of: Callable[[Any], object]
    """The ids the subject names, read from a body (``operator.attrgetter``)."""
    ids: object
    others: tuple[str, ...]
    """The body's id fields the subject does not name: checked on every event."""


_BOUND: dict[str, _Bound] = {}
"""By subject. A stream repeats its subjects (a node's ``approved``, ``degraded``, ...),
and the checks below cost ~3x the decode; remembered, one costs a lookup and a compare
(bounded like ``_VALID_IDS``)."""
_BOUND_MAX = 100_000


def bind_event(subject: str, data: bytes | bytearray) -> codec.AnyEvent:
    """The domain event stored on ``subject``, if the subject vouches for it; else
    ``Unvouched`` with the reason (undecodable, a type the family may not carry, a body
    naming another type or id than its subject, an invalid id)."""
    bound = _BOUND.get(subject)
    family = _events_family(subject) if bound is None else None
    try:
        event = codec.decode_event(data)
    except (codec.DecodeError, RecursionError, ValueError) as err:
        raise Unvouched(f"undecodable: {printable(str(err))}") from None
    if bound is not None and type(event) is bound.type and bound.ids_of(event) == bound.ids:
        if bound.others:
            _check_fields(event, bound.others)
        return event
    family = family or _events_family(subject)
    if not isinstance(event, family.base):
        raise Unvouched(f"herd.{family.prefix}.* may not carry {codec.event_tag(type(event))}")
    check_ids(event)
    expected = expected_subject(event)
    if expected != subject:
        raise Unvouched(f"body is {codec.event_tag(type(event))} for {printable(expected, 120)}, "
                      f"not for its subject {printable(subject, 120)}")
    if len(_BOUND) >= _BOUND_MAX:
        _BOUND.clear()
    ids_of = attrgetter(*family.id_tokens)
    _BOUND[subject] = _Bound(type(event), ids_of, ids_of(event), tuple(
        name for name in _id_fields(type(event)) if name not in family.id_tokens))
    return event


def bind_node_report(subject: str, node_id: str) -> None:
    """A heartbeat, resource or health report on ``herd.<hb|res|health>.<id>`` must name
    that id (valid) as its ``node_id``; else ``Unvouched``. A heartbeat may also come as
    ``herd.hb.<shard>.<id>`` (the server's liveness-shard mapping, ``events.hb_shards``):
    the id is still bound from the subject's last token."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[1] == "hb" and shard_in_subject(subject) is not None:
        parts = parts[:2] + parts[3:]
    if len(parts) != 3:
        raise Unvouched(f"subject {printable(subject, 120)!r} is not herd.<kind>.<node id>")
    try:
        validate_id(parts[2])
    except InvalidIdError as err:
        raise Unvouched(printable(str(err))) from None
    if node_id != parts[2]:
        raise Unvouched(f"body names node {printable(node_id, 120)!r}, its subject {parts[2]!r}")


_telemetry_decoder = msgspec.json.Decoder(GpuTelemetry)


def bind_telemetry(subject: str, data: bytes | bytearray) -> GpuTelemetry:
    """The per-GPU telemetry stored on ``herd.gpu.<id>``, if the subject vouches for it;
    else ``Unvouched`` with the reason. It must decode as ``GpuTelemetry``, name the
    subject's node and a valid boot id, and carry at least one GPU, each index once: the
    agent publishes none for a node without GPUs, so a body of another type (a heartbeat,
    a resource report, an event: none has a top-level ``gpus``) is refused here rather
    than taken for a node whose GPUs vanished."""
    family = family_of(subject)
    if family is None or family.base is not GpuTelemetry:
        raise Unvouched(f"subject {printable(subject, 120)!r} carries no GPU telemetry")
    try:
        telemetry = _telemetry_decoder.decode(data)
    except (msgspec.DecodeError, RecursionError) as err:
        raise Unvouched(f"undecodable: {printable(str(err))}") from None
    bind_node_report(subject, telemetry.node_id)
    check_ids(telemetry)
    if not telemetry.boot_id:
        raise Unvouched("telemetry names no boot id")
    indexes = [reading.index for reading in telemetry.gpus]
    if not indexes:
        raise Unvouched("telemetry of no GPU (a body of another type?)")
    if len(set(indexes)) != len(indexes) or min(indexes) < 0:
        raise Unvouched(f"GPU indexes {printable(str(indexes), 120)} are not distinct and >= 0")
    return telemetry


# The API routes that only read: what a read-only HTTP token and `herd creds operator
# --reader` may call (the HTTP API serves them as GET too; web/routes.py). Fail closed: a
# new route is a command until listed here.
API_READS = frozenset({
    "node.list", "node.describe", "node.conformance", "node.history", "node.list_at",
    "node.describe_at", "job.list", "job.status", "eval.list", "eval.status", "alloc.list",
    "alloc.status", "instance.list", "instance.describe", "pool.list", "pool.status",
    "status", "audit.list", "audit.verify", "breaker.status", "gpu.list", "gpu.describe",
    "fleet.repairs",
    "eval.describe",   # not alloc.logs (output may hold secrets) nor job.plan (a spec body)
})
