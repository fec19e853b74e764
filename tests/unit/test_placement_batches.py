"""How a plan is cut into atomic batches (``plan_batches``) and how a batch's messages
are written (``hpub_frame``): pure, no server."""

from __future__ import annotations

import pytest
from nats.aio.client import _CRLF_, NATS_HDR_LINE
from nats.protocol.command import hpub_cmd

from herdbook.events.batch import MAX_BATCH, hpub_frame
from herdbook.reactors.placement import Placement, Slot
from herdbook.reactors.plan_apply import NodePlan, plan_batches


def part(node_id: str, events: int) -> NodePlan:
    return NodePlan(node_id, 0, [Placement(Slot(i), node_id) for i in range(events)])


def test_whole_nodes_in_order_in_batches_of_about_the_size() -> None:
    parts = [part(f"n{i:03d}", 8) for i in range(500)]       # 4,000 events
    batches = plan_batches(parts, 512)
    assert [p for b in batches for p in b] == parts            # every node once, in order
    sizes = [sum(len(p.placed) for p in b) for b in batches]
    assert len(batches) == 8 and max(sizes) - min(sizes) <= 64, sizes


def test_a_batch_never_passes_the_servers_limit_unless_one_node_does() -> None:
    parts = [part("a", 600), part("b", 600), part("c", MAX_BATCH + 5), part("d", 1)]
    batches = plan_batches(parts, 2000)
    assert [[p.node_id for p in b] for b in batches] == [["a"], ["b"], ["c"], ["d"]]
    assert plan_batches([part("a", 3), part("b", 3)], 512) == [[part("a", 3), part("b", 3)]]


def test_a_frame_is_what_nats_py_writes_for_the_same_message() -> None:
    headers = {"Nats-Msg-Id": "e1", "Nats-Expected-Last-Subject-Sequence": "17",
               "Nats-Expected-Last-Subject-Sequence-Subject": "herd.alloc.n1.>"}
    hdr = bytearray(NATS_HDR_LINE + _CRLF_)
    for key, value in headers.items():
        hdr += f"{key}: {value}".encode() + _CRLF_
    hdr += _CRLF_
    expected = hpub_cmd("herd.alloc.n1.placed", "", bytes(hdr), b'{"x":1}')
    assert hpub_frame("herd.alloc.n1.placed", headers, b'{"x":1}') == expected.replace(
        b"HPUB herd.alloc.n1.placed  ", b"HPUB herd.alloc.n1.placed ")


def test_a_header_value_with_a_line_break_is_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        hpub_frame("herd.alloc.n1.placed", {"Nats-Msg-Id": "e1\r\nPUB x 1"}, b"")
