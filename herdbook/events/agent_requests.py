"""Requests an operator (or the simulator, or the control plane) sends to one agent, on
the wire: ``herd.agent.<node>.inject``, ``herd.agent.<node>.fingerprint`` and
``herd.agent.<node>.logs`` (request/reply, no stream; ``authority.AGENT_SERVED``). The
agent decodes the request with these Structs and answers with the reply Structs; ``herd
agent inject``, ``herd node fingerprint``, the control plane's ``alloc.logs`` and the
simulator encode and decode the same ones. A request that does not decode gets a reply
with ``ok`` false and the reason, never a traceback."""

from __future__ import annotations

from typing import Annotated, TypeVar

import msgspec

from herdbook.events.decode_errors import error_path
from herdbook.events.faults import Fault

T = TypeVar("T")


class InjectRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A GPU fault for the agent's fake NVML backend (an agent run with --fake-gpus)."""

    fault: Fault
    gpu: Annotated[int, msgspec.Meta(ge=0)] = 0
    value: float | None = None
    """XID code, temperature in °C, error count or driver version, by ``fault``."""


class InjectReply(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    result: str = ""
    """What was done, e.g. ``XID 79 on GPU 3``."""
    error: str = ""


class FingerprintRequest(msgspec.Struct, frozen=True, kw_only=True,
                         forbid_unknown_fields=True):
    """Recompute the conformance fingerprint now (and heartbeat it at once)."""


class FingerprintReply(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    fingerprint: str = ""
    error: str = ""


inject_request_decoder = msgspec.json.Decoder(InjectRequest)
inject_reply_decoder = msgspec.json.Decoder(InjectReply)
fingerprint_request_decoder = msgspec.json.Decoder(FingerprintRequest)
fingerprint_reply_decoder = msgspec.json.Decoder(FingerprintReply)


def decode_request(decoder: msgspec.json.Decoder[T], data: bytes) -> T:
    """An empty body is the request with every default; a bad one raises ``ValueError``
    naming the field (``gpu: Expected `int` >= 0``)."""
    try:
        return decoder.decode(data or b"{}")
    except msgspec.DecodeError as err:
        raise ValueError(error_path(str(err))) from None


LOGS_MAX_BYTES = 128 * 1024
"""The most bytes of a log one reply carries: JSON may escape a control byte as six, and
six times this still fits nats-server's default 1 MiB payload. A bigger log is read in
pieces (``offset``), so neither the agent nor the control plane ever holds more."""
LOGS_MAX_LINES = 10_000


class LogsRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``herd.agent.<node>.logs``: a workload's output (``<state dir>/allocs/<id>.log``).
    Without ``offset`` its last ``tail`` lines; with one, what follows that byte offset.
    At most ``max_bytes`` either way."""

    alloc_id: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,128}\Z")]
    offset: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tail: Annotated[int, msgspec.Meta(ge=0, le=LOGS_MAX_LINES)] = 100
    max_bytes: Annotated[int, msgspec.Meta(ge=1, le=LOGS_MAX_BYTES)] = LOGS_MAX_BYTES


class LogsReply(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    data: str = ""
    offset: int = 0
    next_offset: int = 0
    size: int = 0
    truncated: bool = False
    error: str = ""
    missing: bool = False
    """The node has no output of that allocation (the control plane answers not_found)."""


logs_request_decoder = msgspec.json.Decoder(LogsRequest)
logs_reply_decoder = msgspec.json.Decoder(LogsReply)
