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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe for a log line or a header: control characters escaped (``\\x1b``),
    cut to ``limit`` characters with the full length said."""
    if len(text) > limit:
        text = text[:limit] + f"... ({len(text)} chars)"
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def validate_id(value: str, what: str = "node id") -> str:
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidIdError(
            f"invalid {what} '{printable(value, 60) if isinstance(value, str) else value}': "
            "use 1-128 characters from A-Z a-z 0-9 _ -"
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


def telemetry_subject(node_id: str) -> str:
    """A node's latest per-GPU telemetry (``events.telemetry``), in HERD_HEARTBEATS."""
    return f"herd.gpu.{validate_id(node_id)}"


def health_subject(node_id: str) -> str:
    return f"herd.health.{validate_id(node_id)}"


def inject_subject(node_id: str) -> str:
    """Fault injection into one agent's fake NVML (request/reply, no stream)."""
    return f"herd.agent.{validate_id(node_id)}.inject"


def holder_subject(node_id: str) -> str:
    """Ask which agent holds a node id (request/reply, no stream; ``agent/fence.py``)."""
    return f"herd.agent.{validate_id(node_id)}.holder"


def fingerprint_subject(node_id: str) -> str:
    """Ask one agent to recompute its conformance fingerprint (request/reply, no stream)."""
    return f"herd.agent.{validate_id(node_id)}.fingerprint"


def logs_subject(node_id: str) -> str:
    """Ask one agent for a workload's output (request/reply, no stream; operators and the
    control plane only: ``authority.AGENT_SERVED``)."""
    return f"herd.agent.{validate_id(node_id)}.logs"


def sync_subject(node_id: str) -> str:
    """An agent's catch-up request for its own allocation events (the control plane
    answers; the node id in the subject is the only one it serves)."""
    return f"herd.sync.{validate_id(node_id)}.allocs"


def deadletter_subject(stream: str) -> str:
    return f"herd.deadletter.{stream}"


def api_subject(noun: str, verb: str) -> str:
    return f"{API_PREFIX}.{noun}.{verb}"


def node_id_of_subject(subject: str) -> str:
    """``herd.hb.<id>`` / ``herd.node.<id>.x`` -> ``<id>``."""
    return subject.split(".", 3)[2]

