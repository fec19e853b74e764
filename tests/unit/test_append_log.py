"""The control plane's log says one line per decision appended: a plan's part of many
placements is one info line with its count, each event a debug line."""

from __future__ import annotations

import logging

import pytest

from herdbook.events.alloc import AllocPlaced
from herdbook.events.job_events import Resources
from herdbook.events.node import NodeApproved
from herdbook.events.store import log_appended


def placed(index: int) -> AllocPlaced:
    return AllocPlaced(node_id="n1", alloc_id=f"a{index}", job_id="j", eval_id="e",
                       index=index, command=["true"], resources=Resources(gpus=1),
                       actor="scheduler")


def test_a_decision_of_many_events_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="herdbook.events.store"):
        log_appended([placed(i) for i in range(8)])
    assert [r.getMessage() for r in caplog.records] == ["n1: 8 AllocPlaced by scheduler"]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="herdbook.events.store"):
        log_appended([placed(i) for i in range(3)])
    assert [r.levelno for r in caplog.records] == [logging.INFO] + [logging.DEBUG] * 3


def test_one_event_says_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="herdbook.events.store"):
        log_appended([NodeApproved(node_id="n1", reason="looks fine", actor="alice")])
        log_appended([])
    assert [r.getMessage() for r in caplog.records] == ["n1 approved by alice: looks fine"]
