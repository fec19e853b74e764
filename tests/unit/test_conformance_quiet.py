"""Quiet when nothing is wrong (issue 16): the sensitive reactor records no
``node.conformance_changed`` for a standard node held against no fingerprint."""

from __future__ import annotations

from herdbook.events.node import NodeConformanceChanged
from herdbook.events.states import NodeClass
from herdbook.projector.node_view import NodeView
from herdbook.reactors.sensitive import decide_conformance
from tests.unit.test_sensitive import node, views


def standard(node_id: str, **fields: object) -> NodeView:
    return node(node_id, node_class=NodeClass.STANDARD, pool="", **fields)


def test_standard_nodes_without_an_expected_fingerprint_record_nothing() -> None:
    # two nodes (no majority of three), two fingerprints, nothing configured
    fleet = views(standard("n1"), standard("n2"))
    assert decide_conformance(fleet, {"n1": "a", "n2": "b"}, {}) == []
    # and a fingerprint that changes is still nobody's business
    assert decide_conformance(fleet, {"n1": "c", "n2": "b"}, {}) == []


def test_sensitive_nodes_and_standard_nodes_with_an_expectation_still_record() -> None:
    sensitive = views(node("s1"), node("s2"))
    assert [e.node_id for e in decide_conformance(sensitive, {"s1": "a", "s2": "b"}, {})
            if isinstance(e, NodeConformanceChanged)] == ["s1", "s2"]
    majority = views(*(standard(f"n{i}") for i in range(3)))
    events = decide_conformance(majority, {"n0": "a", "n1": "a", "n2": "z"}, {})
    assert [(e.node_id, e.drift) for e in events if isinstance(e, NodeConformanceChanged)] \
        == [("n0", False), ("n1", False), ("n2", True)]
    # a standard node that drifted, once held against nothing, has its flag cleared
    drifted = views(standard("n1", fingerprint="z", fingerprint_expected="a", drift=True))
    [cleared] = decide_conformance(drifted, {"n1": "z"}, {})
    assert isinstance(cleared, NodeConformanceChanged) and not cleared.drift
