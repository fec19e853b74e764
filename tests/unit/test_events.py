"""The event vocabulary: codec round-trips, immutability, subjects, schema, fold coverage."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import msgspec
import pytest

from herdbook.events.alloc import (
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocPlaced,
    AllocRequeueApproved,
    AllocRunning,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.events.base import Event
from herdbook.events.breaker_events import BreakerReset, BreakerTripped, HeldAction, NodeActionHeld
from herdbook.events.codec import (
    EVENT_TYPES,
    DecodeError,
    decode_event,
    encode,
    event_tag,
    json_schema,
)
from herdbook.events.eval_events import (
    EvalCreated,
    EvalEnqueued,
    EvalLinked,
    EvalStatusChanged,
)
from herdbook.events.evals import EvalStatus, Step
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.instance import (
    InstanceEvent,
    InstanceFailed,
    InstanceProviderError,
    InstanceProvisioned,
    InstanceProvisioning,
    InstanceRunning,
    InstanceTerminated,
    InstanceTerminating,
)
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec, Resources
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeClaimed,
    NodeConformanceChanged,
    NodeCordoned,
    NodeDeclared,
    NodeDegraded,
    NodeDeleted,
    NodeDisabled,
    NodeDown,
    NodeDrained,
    NodeDrainStarted,
    NodeEnabled,
    NodeFailed,
    NodeInfo,
    NodeInfoUpdated,
    NodeNotificationFailed,
    NodeRecovered,
    NodeRegistered,
    NodeRejected,
    NodeReleased,
    NodeTerminated,
    NodeUncordoned,
    NodeUndrained,
    NodeValidated,
    NodeValidationDue,
    NodeValidationFailed,
    NodeValidationStarted,
    NodeWiped,
    NodeWipeFailed,
    NodeWipeStarted,
    NodeWipeStepReported,
)
from herdbook.events.pool import PoolScaled
from herdbook.events.states import Health, Intent, NodeClass, NodeType
from herdbook.events.store import subject_of
from herdbook.events.subjects import (
    InvalidIdError,
    aggregate_filter,
    event_subject,
    health_subject,
    heartbeat_subject,
    printable,
    resources_subject,
    validate_id,
)
from herdbook.projector.instance_view import apply_instance
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView

AT = datetime(2025, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)
INFO = NodeInfo(
    hostname="gpu-017.rack4", arch="x86_64", os="linux", cpus=96, memory_bytes=2**40,
    gpus=(GpuInfo(index=0, uuid="GPU-0f1e", name="H100", memory_bytes=80 * 2**30,
                  driver_version="550.54"),),
    labels={"rack": "4", "zone": "b"}, node_class=NodeClass.SENSITIVE,
    agent_version="0.1.0", instance_id="i-0abc",
)
ENVELOPE = {"at": AT, "actor": "alice", "causation_id": "c-1", "correlation_id": "k-1"}

# One sample per event type, every payload field away from its default.
SAMPLES: dict[type[Event], Event] = {
    NodeRegistered: NodeRegistered(node_id="gpu-017", node_type=NodeType.REQUESTER,
                                   boot_id="boot-2", info=INFO, **ENVELOPE),
    NodeInfoUpdated: NodeInfoUpdated(node_id="gpu-017", info=INFO, **ENVELOPE),
    NodeApproved: NodeApproved(node_id="gpu-017", reason="racked", **ENVELOPE),
    NodeRejected: NodeRejected(node_id="gpu-017", reason="unknown host", **ENVELOPE),
    NodeDeleted: NodeDeleted(node_id="gpu-017", reason="decommissioned", **ENVELOPE),
    NodeDegraded: NodeDegraded(node_id="gpu-017", heartbeat_age=31.5, reason="silent",
                               **ENVELOPE),
    NodeRecovered: NodeRecovered(node_id="gpu-017", reason="heartbeat resumed", **ENVELOPE),
    NodeDown: NodeDown(node_id="gpu-017", heartbeat_age=92.0, reason="grace expired",
                       **ENVELOPE),
    NodeDeclared: NodeDeclared(node_id="gpu-017", reason="racked", labels={"rack": "4"},
                               node_class=NodeClass.BORROWED, **ENVELOPE),
    NodeBootStarted: NodeBootStarted(node_id="gpu-017", trigger="reboot", boot_id="boot-3",
                                     reason="reimage", **ENVELOPE),
    NodeBootChecked: NodeBootChecked(node_id="gpu-017", boot_id="boot-3", passed=True,
                                     checks={"nvml": "ok"}, **ENVELOPE),
    NodeFailed: NodeFailed(node_id="gpu-017", reason="boot timeout", **ENVELOPE),
    NodeCordoned: NodeCordoned(node_id="gpu-017", reason="maintenance", **ENVELOPE),
    NodeUncordoned: NodeUncordoned(node_id="gpu-017", reason="done", **ENVELOPE),
    NodeDrainStarted: NodeDrainStarted(node_id="gpu-017", reason="upgrade", urgent=True,
                                       deadline_s=600.0, **ENVELOPE),
    NodeDrained: NodeDrained(node_id="gpu-017", reason="idle", **ENVELOPE),
    NodeUndrained: NodeUndrained(node_id="gpu-017", reason="upgraded", **ENVELOPE),
    NodeDisabled: NodeDisabled(node_id="gpu-017", reason="bad PSU", **ENVELOPE),
    NodeEnabled: NodeEnabled(node_id="gpu-017", reason="PSU swapped", forced=True, **ENVELOPE),
    NodeHealthChanged: NodeHealthChanged(node_id="gpu-017", health=Health.UNHEALTHY,
                                         reason="XID 79", report_id="r-1", fatal=True,
                                         **ENVELOPE),
    NodeTerminated: NodeTerminated(node_id="gpu-017", instance_id="i-1", reason="replaced",
                                   **ENVELOPE),
    NodeNotificationFailed: NodeNotificationFailed(node_id="gpu-017", action="cordon",
                                                   reason="503", attempts=4, **ENVELOPE),
    EvalCreated: EvalCreated(eval_id="e-1", job_id="train", triggered_by=Trigger.NODE_UPDATE,
                             status=EvalStatus.BLOCKED, priority=70, previous_eval="e-0",
                             node_id="gpu-017", wait_until=AT, **ENVELOPE),
    EvalStatusChanged: EvalStatusChanged(eval_id="e-1", step=Step.UNBLOCK,
                                         status=EvalStatus.SCHEDULING, reason="capacity",
                                         **ENVELOPE),
    EvalEnqueued: EvalEnqueued(eval_id="e-1", step=Step.UNBLOCK, status=EvalStatus.SCHEDULING,
                               reason="node gpu-9 ready", **ENVELOPE),
    EvalLinked: EvalLinked(eval_id="e-1", next_eval="e-2", blocked_eval="e-3", **ENVELOPE),
    JobRegistered: JobRegistered(job_id="train", spec=JobSpec(id="train", command=["true"],
                                                              count=3), version=2, **ENVELOPE),
    JobDeregistered: JobDeregistered(job_id="train", reason="done", **ENVELOPE),
    PoolScaled: PoolScaled(pool="train", size=5, reason="more", **ENVELOPE),
    NodeActionHeld: NodeActionHeld(node_id="gpu-017", kind=HeldAction.UNHEALTHY, scope="fleet",
                                   reason="breaker open", would="UNHEALTHY", **ENVELOPE),
    BreakerTripped: BreakerTripped(scope="pool:train", taken_out=4, size=40, limit=4,
                                   reason="breaker open", **ENVELOPE),
    BreakerReset: BreakerReset(scope="", reason="checked", **ENVELOPE),
    InstanceProvisioning: InstanceProvisioning(
        instance_id="i-1", pool="train", provider="local", node_id="train-1",
        node_class=NodeClass.SENSITIVE, labels={"zone": "a"}, reason="below min_nodes",
        replaces="train-0", **ENVELOPE),
    InstanceProvisioned: InstanceProvisioned(instance_id="i-1", provider_ref="pid 42",
                                             **ENVELOPE),
    InstanceRunning: InstanceRunning(instance_id="i-1", node_id="train-1", **ENVELOPE),
    InstanceFailed: InstanceFailed(instance_id="i-1", reason="no registration", **ENVELOPE),
    InstanceTerminating: InstanceTerminating(instance_id="i-1", reason="unhealthy",
                                             **ENVELOPE),
    InstanceTerminated: InstanceTerminated(instance_id="i-1", reason="replaced", **ENVELOPE),
    InstanceProviderError: InstanceProviderError(instance_id="i-1", operation="provision",
                                                 reason="quota", **ENVELOPE),
    NodeClaimed: NodeClaimed(node_id="gpu-017", user="ana", tenant="bio", reason="trial",
                             **ENVELOPE),
    NodeReleased: NodeReleased(node_id="gpu-017", user="ana", reason="done", **ENVELOPE),
    NodeWipeStarted: NodeWipeStarted(node_id="gpu-017", attempt=2, forced=True, timeout_s=60.0,
                                     reason="released", **ENVELOPE),
    NodeWipeStepReported: NodeWipeStepReported(node_id="gpu-017", step="nvme_secure_erase",
                                               ok=False, detail="exit 1", **ENVELOPE),
    NodeWiped: NodeWiped(node_id="gpu-017", steps=["gpu_memory_clear"], **ENVELOPE),
    NodeWipeFailed: NodeWipeFailed(node_id="gpu-017", reason="timeout", step="ram_scrub",
                                   **ENVELOPE),
    NodeConformanceChanged: NodeConformanceChanged(node_id="gpu-017", fingerprint="ab",
                                                   expected="cd", drift=True, reason="majority",
                                                   **ENVELOPE),
    NodeValidationStarted: NodeValidationStarted(
        node_id="gpu-017", trigger="returned", check="dcgm-diag",
        command=["dcgmi", "diag", "-r", "2"], timeout_s=900.0, alloc_id="v-1",
        reason="back from DOWN", **ENVELOPE),
    NodeValidated: NodeValidated(node_id="gpu-017", alloc_id="v-1", check="dcgm-diag",
                                 trigger="returned", started_at=AT, duration_s=61.5,
                                 output="Pass", **ENVELOPE),
    NodeValidationFailed: NodeValidationFailed(
        node_id="gpu-017", alloc_id="v-1", reason="dcgm-diag exited 1: Fail", check="dcgm-diag",
        trigger="operator", exit_code=1, started_at=AT, duration_s=12.0,
        output="Fail", failures=2, quarantine=True, recommended_action="inspect_hardware",
        **ENVELOPE),
    NodeValidationDue: NodeValidationDue(node_id="gpu-017", trigger="returned",
                                         reason="replaces gpu-007", **ENVELOPE),
    AllocPlaced: AllocPlaced(node_id="gpu-017", alloc_id="a-1", job_id="train", eval_id="e-1",
                             index=2, command=["sleep", "9"], resources=Resources(gpus=2),
                             job_version=3, requeue_count=1, previous_alloc="a-0", **ENVELOPE),
    AllocRunning: AllocRunning(node_id="gpu-017", alloc_id="a-1", pid=4242, reattached=True,
                               **ENVELOPE),
    AllocCompleted: AllocCompleted(node_id="gpu-017", alloc_id="a-1", exit_code=0,
                                   output="Pass", **ENVELOPE),
    AllocFailed: AllocFailed(node_id="gpu-017", alloc_id="a-1", exit_code=3, reason="exit 3",
                             output="Fail", **ENVELOPE),
    AllocStopRequested: AllocStopRequested(node_id="gpu-017", alloc_id="a-1", reason="drain",
                                           migrate=True, signal="SIGUSR1", grace_s=60.0,
                                           kill_timeout_s=5.0, force=True, **ENVELOPE),
    AllocStopped: AllocStopped(node_id="gpu-017", alloc_id="a-1", exit_code=-15, **ENVELOPE),
    AllocLost: AllocLost(node_id="gpu-017", alloc_id="a-1", reason="node down",
                         requeue_allowed=False, **ENVELOPE),
    AllocRequeueApproved: AllocRequeueApproved(node_id="gpu-017", alloc_id="a-1",
                                               reason="checked", **ENVELOPE),
}

EVENTS = [SAMPLES[t] for t in EVENT_TYPES]
EVENT_IDS = [event_tag(t) for t in EVENT_TYPES]


def test_every_event_type_has_a_sample() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES)


# codec ----------------------------------------------------------------------------


@pytest.mark.parametrize("event", EVENTS, ids=EVENT_IDS)
def test_event_round_trips_through_the_codec(event: Event) -> None:
    # given an event with every field set, when encoded and decoded
    decoded = decode_event(encode(event))
    # then it is the same event, of the same type
    assert type(decoded) is type(event)
    assert decoded == event


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=EVENT_IDS)
def test_encoded_event_carries_its_tag(event_type: type[Event]) -> None:
    payload = json.loads(encode(SAMPLES[event_type]))
    assert payload["type"] == event_tag(event_type)


def test_unknown_tag_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_event(b'{"type": "node.teleported", "node_id": "gpu-017"}')


@pytest.mark.parametrize("event", EVENTS, ids=EVENT_IDS)
def test_events_are_frozen(event: Event) -> None:
    with pytest.raises(AttributeError):
        event.actor = "mallory"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        event.node_id = "other"  # type: ignore[attr-defined]


def test_fresh_events_get_distinct_ids_and_aware_timestamps() -> None:
    first, second = NodeApproved(node_id="a"), NodeApproved(node_id="a")
    assert first.event_id != second.event_id
    assert first.at.tzinfo is not None


# subjects ---------------------------------------------------------------------------


@pytest.mark.parametrize("event", EVENTS, ids=EVENT_IDS)
def test_subject_of_event_is_aggregate_id_then_event_name(event: Event) -> None:
    aggregate, name = event_tag(type(event)).split(".", 1)
    if isinstance(event, AllocEvent):  # one node's allocations share a prefix (DESIGN §3)
        name = f"{event.alloc_id}.{name}"
    assert subject_of(event) == f"herd.{aggregate}.{event.aggregate_id}.{name}"


def test_subject_of_spells_multiword_names_with_underscores() -> None:
    assert subject_of(NodeInfoUpdated(node_id="n1", info=INFO)) == "herd.node.n1.info_updated"


BUILDERS: dict[str, Callable[[str], str]] = {
    "event_subject": lambda node_id: event_subject("node", node_id, "approved"),
    "aggregate_filter": lambda node_id: aggregate_filter("node", node_id),
    "heartbeat_subject": heartbeat_subject,
    "resources_subject": resources_subject,
    "health_subject": health_subject,
    "validate_id": validate_id,
    "subject_of": lambda node_id: subject_of(NodeApproved(node_id=node_id)),
}

BAD_IDS = ["a.b", "a b", "*", ">", "", "x" * 129, "gpu/017", "gpu\t1"]


@pytest.mark.parametrize("build", BUILDERS.values(), ids=BUILDERS.keys())
@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_subject_builders_reject_bad_ids(build: Callable[[str], str], bad: str) -> None:
    with pytest.raises(InvalidIdError) as excinfo:
        build(bad)
    # shown quoted, control characters escaped, a long one cut (a log or terminal is safe)
    assert f"'{printable(bad, 60)}'" in str(excinfo.value)
    assert str(excinfo.value).isprintable()


def test_subject_builders_reject_a_trailing_newline() -> None:
    with pytest.raises(InvalidIdError):
        heartbeat_subject("gpu-017\n")


@pytest.mark.parametrize("good", ["gpu-017", "node_1", "A", "x" * 128])
def test_subject_builders_accept_good_ids(good: str) -> None:
    assert heartbeat_subject(good) == f"herd.hb.{good}"
    assert resources_subject(good) == f"herd.res.{good}"
    assert health_subject(good) == f"herd.health.{good}"
    assert aggregate_filter("node", good) == f"herd.node.{good}.>"
    assert event_subject("node", good, "down") == f"herd.node.{good}.down"


# JSON Schema ------------------------------------------------------------------------


def test_json_schema_lists_every_event_tag() -> None:
    schema = json_schema()
    defs = schema["$defs"]
    tags = {
        tag
        for ref in schema["oneOf"]
        for tag in defs[ref["$ref"].removeprefix("#/$defs/")]["properties"]["type"]["enum"]
    }
    assert tags == {event_tag(t) for t in EVENT_TYPES}
    assert "Heartbeat" in defs and "NodeResources" in defs
    json.dumps(schema)  # serialisable as is


# every fold handles every event (STYLE point 5) ---------------------------------------

ENVELOPE_FIELDS = {"version", "updated_at", "last_event"}


def _registered_view(event: Event) -> NodeView | None:
    """The state in which ``event`` is meaningful."""
    if isinstance(event, NodeDeclared):
        return None
    view = apply(None, NodeRegistered(node_id="gpu-017", boot_id="boot-1"), 1)
    assert view is not None
    given = {NodeUncordoned: Intent.CORDONED, NodeDrained: Intent.DRAINING,
             NodeUndrained: Intent.DRAINING, NodeEnabled: Intent.DISABLED}.get(type(event))
    if isinstance(event, NodeWiped | NodeWipeFailed):   # they settle a wipe in progress
        view = msgspec.structs.replace(view, wipe_status="wiping")
    if isinstance(event, NodeValidated | NodeValidationFailed):   # they settle a validation
        view = msgspec.structs.replace(view, validation="running", validation_alloc="v-1")
    return view if given is None else msgspec.structs.replace(view, intent=given)


NODE_EVENTS = [e for e in EVENTS
               if not isinstance(e, InstanceEvent | PoolScaled | BreakerTripped | BreakerReset
                                 | EvalCreated
                                 | EvalStatusChanged | EvalEnqueued | EvalLinked | JobRegistered
                                 | JobDeregistered | AllocEvent)]
# (provisioning creates the view: it is the "given" of every instance test)
INSTANCE_EVENTS = [e for e in EVENTS
                   if isinstance(e, InstanceEvent) and not isinstance(e, InstanceProvisioning)]


@pytest.mark.parametrize("event", INSTANCE_EVENTS, ids=lambda e: e.event_name)
def test_instance_fold_handles_every_instance_event(event: InstanceEvent) -> None:
    view = apply_instance(None, SAMPLES[InstanceProvisioning], 1)  # type: ignore[arg-type]
    assert view is not None
    after = apply_instance(view, event, 2)
    assert after is not None and after.version == 2
    assert after != msgspec.structs.replace(view, version=2, updated_at=after.updated_at)


@pytest.mark.parametrize("event", NODE_EVENTS, ids=lambda e: e.event_name)
def test_node_fold_handles_every_event_type(event: Event) -> None:
    # given a registered node at version 1 (none, for a declaration)
    view = _registered_view(event)
    if view is None:
        created = apply(None, event, 2)  # type: ignore[arg-type]
        assert created is not None and created.version == 2
        return
    # when any event of the union is folded at sequence 2
    after = apply(view, event, 2)  # type: ignore[arg-type]
    # then the view is removed (deleted) or moved to the event
    if isinstance(event, NodeDeleted):
        assert after is None
        return
    assert after is not None
    assert after.version == 2
    assert after.last_event == event.event_name
    # and the fold did something with the payload, not only the envelope
    changed = {
        name for name in msgspec.structs.asdict(view)
        if getattr(view, name) != getattr(after, name)
    }
    assert changed - ENVELOPE_FIELDS, f"{event.event_name} only touched {changed}"
