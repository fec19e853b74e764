"""Subject builders. IDs are single subject tokens, validated with a clear error."""

from __future__ import annotations

import re

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

EVENTS_STREAM = "HERD_EVENTS"
HEARTBEATS_STREAM = "HERD_HEARTBEATS"
HEALTH_STREAM = "HERD_HEALTH"

API_PREFIX = "herd.api.v1"
CLOCK_PROBE_SUBJECT = "herd.clock.probe"


class InvalidIdError(ValueError):
    pass


def validate_id(value: str, what: str = "node id") -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidIdError(
            f"invalid {what} {value!r}: use 1-128 characters from A-Z a-z 0-9 _ -"
        )
    return value


def aggregate_filter(aggregate: str, aggregate_id: str) -> str:
    """All subjects of one aggregate, e.g. ``herd.node.gpu-017.>``."""
    return f"herd.{aggregate}.{validate_id(aggregate_id)}.>"


def event_subject(aggregate: str, aggregate_id: str, event_name: str) -> str:
    return f"herd.{aggregate}.{validate_id(aggregate_id)}.{event_name}"


def heartbeat_subject(node_id: str) -> str:
    return f"herd.hb.{validate_id(node_id)}"


def resources_subject(node_id: str) -> str:
    return f"herd.res.{validate_id(node_id)}"


def health_subject(node_id: str) -> str:
    return f"herd.health.{validate_id(node_id)}"


def inject_subject(node_id: str) -> str:
    """Fault injection into one agent's fake NVML (request/reply, no stream)."""
    return f"herd.agent.{validate_id(node_id)}.inject"


def deadletter_subject(stream: str) -> str:
    return f"herd.deadletter.{stream}"


def api_subject(noun: str, verb: str) -> str:
    return f"{API_PREFIX}.{noun}.{verb}"


def node_id_of_subject(subject: str) -> str:
    """``herd.hb.<id>`` / ``herd.node.<id>.x`` -> ``<id>``."""
    return subject.split(".", 3)[2]
