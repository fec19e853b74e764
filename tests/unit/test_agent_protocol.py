"""The node's side of the agent protocol and the typed agent requests, without a server."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from herdbook.agent.protocol import MemorySequence, NodeProtocol
from herdbook.agent.state import SeqAllocator
from herdbook.events.agent_requests import (
    FingerprintRequest,
    InjectReply,
    InjectRequest,
    decode_request,
    fingerprint_request_decoder,
    inject_reply_decoder,
    inject_request_decoder,
)
from herdbook.events.node import NodeInfo
from herdbook.events.states import NodeType


def test_a_new_boot_is_announced_checked_and_heartbeated_under_one_boot_id() -> None:
    node = NodeProtocol("n1", actor="agent:n1", seqs=MemorySequence())
    first = node.registered(NodeInfo(hostname="n1"))
    assert first.boot_id == node.boot_id and first.node_type is NodeType.COMPUTE
    old = node.boot_id
    node.new_boot()
    started, beat = node.boot_started(), node.heartbeat(gpu_count=8)
    checked = node.boot_checked({"nvml": "ok", "gpu_count": "found 7"})
    assert node.boot_id != old
    assert started.boot_id == beat.boot_id == checked.boot_id == node.boot_id
    assert started.trigger == "agent_started" and started.actor == "agent:n1"
    assert not checked.passed and node.boot_checked({"nvml": "ok"}).passed
    assert (beat.seq, node.heartbeat().seq) == (1, 2) and beat.gpu_count == 8


def test_heartbeat_seq_grows_across_restarts_and_on_a_full_disk(tmp_path: Path) -> None:
    seqs = [NodeProtocol("n1", actor="a", seqs=SeqAllocator(tmp_path)).heartbeat().seq
            for _ in range(2)]
    assert seqs[1] > seqs[0]
    allocator = SeqAllocator(tmp_path / "missing" / "dir")   # every write fails
    node = NodeProtocol("n1", actor="a", seqs=allocator)
    assert node.heartbeat().seq < node.heartbeat().seq


def test_requests_round_trip_and_an_empty_body_is_the_default() -> None:
    request = InjectRequest(fault="xid", gpu=3, value=79)
    assert decode_request(inject_request_decoder, msgspec.json.encode(request)) == request
    assert decode_request(fingerprint_request_decoder, b"") == FingerprintRequest()
    reply = inject_reply_decoder.decode(msgspec.json.encode(InjectReply(ok=True, result="x")))
    assert reply.ok and reply.result == "x" and reply.error == ""


@pytest.mark.parametrize(("body", "message"), [
    (b'{"fault": "meltdown"}', "fault: Invalid enum value 'meltdown'"),
    (b'{"fault": "xid", "gpu": -1}', "gpu: Expected `int` >= 0"),
    (b'{"fault": "xid", "gpu": "3"}', "gpu: Expected `int`, got `str`"),
    (b'{"fault": "xid", "extra": 1}', "Object contains unknown field `extra`"),
    (b"not json", "JSON is malformed"),
    (b"[]", "Expected `object`, got `array`"),
])
def test_a_bad_request_is_a_value_error_naming_the_field(body: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        decode_request(inject_request_decoder, body)
