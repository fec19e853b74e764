"""One union of every event, one decoder, one encoder, the JSON Schema."""

from __future__ import annotations

from typing import Any

import msgspec

from herdbook.events.alloc import (
    AllocCompleted,
    AllocFailed,
    AllocLost,
    AllocPlaced,
    AllocRequeueApproved,
    AllocRunning,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.events.base import Event
from herdbook.events.breaker_events import BreakerReset, BreakerTripped, NodeActionHeld
from herdbook.events.eval_events import (
    EvalCreated,
    EvalEnqueued,
    EvalLinked,
    EvalStatusChanged,
)
from herdbook.events.health_report import HealthReport, NodeHealthChanged
from herdbook.events.heartbeat import Heartbeat, NodeResources
from herdbook.events.instance import (
    InstanceFailed,
    InstanceProviderError,
    InstanceProvisioned,
    InstanceProvisioning,
    InstanceRunning,
    InstanceTerminated,
    InstanceTerminating,
)
from herdbook.events.job_events import JobDeregistered, JobRegistered
from herdbook.events.node import (
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

AnyNodeEvent = (
    NodeRegistered | NodeInfoUpdated | NodeApproved | NodeRejected | NodeDeleted
    | NodeDegraded | NodeRecovered | NodeDown
    | NodeDeclared | NodeBootStarted | NodeBootChecked | NodeFailed
    | NodeCordoned | NodeUncordoned | NodeDrainStarted | NodeDrained | NodeUndrained
    | NodeDisabled | NodeEnabled | NodeHealthChanged | NodeTerminated
    | NodeNotificationFailed | NodeClaimed | NodeReleased | NodeWipeStarted
    | NodeWipeStepReported | NodeWiped | NodeWipeFailed | NodeConformanceChanged
    | NodeActionHeld | NodeValidationStarted | NodeValidated | NodeValidationFailed
    | NodeValidationDue
)
AnyInstanceEvent = (
    InstanceProvisioning | InstanceProvisioned | InstanceRunning | InstanceFailed
    | InstanceTerminating | InstanceTerminated | InstanceProviderError
)
AnyEvalEvent = EvalCreated | EvalStatusChanged | EvalEnqueued | EvalLinked
AnyAllocEvent = (AllocPlaced | AllocRunning | AllocCompleted | AllocFailed | AllocStopRequested
                 | AllocStopped | AllocLost | AllocRequeueApproved)
AnyEvent = (AnyNodeEvent | AnyInstanceEvent | PoolScaled | AnyEvalEvent | JobRegistered
            | JobDeregistered | AnyAllocEvent | BreakerTripped | BreakerReset)

EVENT_TYPES: tuple[type[Event], ...] = AnyEvent.__args__

_event_decoder = msgspec.json.Decoder(AnyEvent)
_heartbeat_decoder = msgspec.json.Decoder(Heartbeat)
_resources_decoder = msgspec.json.Decoder(NodeResources)
_report_decoder = msgspec.json.Decoder(HealthReport)
_encoder = msgspec.json.Encoder()

DecodeError = msgspec.DecodeError


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
    """Every failure is a ``DecodeError``: a 50k-deep nested body raises RecursionError
    inside msgspec, and must reach the dead-letter path like any other garbage."""
    try:
        return decoder.decode(data)
    except RecursionError as err:
        raise DecodeError(str(err)) from None


def decode_event(data: bytes | bytearray) -> AnyEvent:
    try:   # _decode, inlined: every event a projector folds comes through here
        event: AnyEvent = _event_decoder.decode(data)
    except RecursionError as err:
        raise DecodeError(str(err)) from None
    return event


def decode_heartbeat(data: bytes) -> Heartbeat:
    beat: Heartbeat = _decode(_heartbeat_decoder, data)
    return beat


def decode_resources(data: bytes) -> NodeResources:
    res: NodeResources = _decode(_resources_decoder, data)
    return res


def decode_health_report(data: bytes) -> HealthReport:
    report: HealthReport = _decode(_report_decoder, data)
    return report


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def event_tag(cls: type[Event]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def json_schema() -> dict[str, Any]:
    """JSON Schema of every event and of the transient reports, for external consumers."""
    (schemas, components) = msgspec.json.schema_components(
        [*EVENT_TYPES, Heartbeat, NodeResources, HealthReport], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "herdbook events",
        "oneOf": list(schemas[: len(EVENT_TYPES)]),
        "$defs": components,
    }
