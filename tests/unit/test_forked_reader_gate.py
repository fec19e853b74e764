"""A large backlog is read by a forked child only where there are cores for it: on fewer
than ``MIN_CPUS`` the child, the parent and nats-server compete for the same ones."""

from __future__ import annotations

import os
import sys

import pytest

from herdbook.events import forked_reader


@pytest.mark.parametrize(("cpus", "forks"), [(1, False), (2, False), (3, False), (4, True),
                                             (16, True)])
def test_a_child_reads_only_with_enough_cpus(monkeypatch, cpus: int, forks: bool) -> None:  # type: ignore[no-untyped-def]
    from herdbook.projector.runner import ProjectorRunner

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
    from nats.aio.client import Client as NATS

    runner = ProjectorRunner(NATS(), ":memory:")   # never started: not connected
    expected = forked_reader.FORK_MIN if forks and sys.platform == "linux" else None
    assert forked_reader.worthwhile() is (expected is not None)
    assert runner.fork_min == expected
