"""Requests an operator (or the simulator) sends to one agent, on the wire:
``herd.agent.<node>.inject`` and ``herd.agent.<node>.fingerprint`` (request/reply, no
stream). The agent decodes the request with these Structs and answers with the reply
Structs; ``herd agent inject``, ``herd node fingerprint`` and the simulator encode and
decode the same ones. A request that does not decode gets a reply with ``ok`` false and
the reason, never a traceback."""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar, get_args

import msgspec

from herdbook.events.errors import error_path

Fault = Literal["xid", "thermal", "ecc-dbe", "ecc-sbe", "nvlink", "pcie", "driver", "clear",
                "nvlink-down", "remap-failed", "throttle", "gpu-missing"]
FAULTS: tuple[str, ...] = get_args(Fault)

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
