"""``Backoff``: the one retry-delay arithmetic (issue 30), and each site's constants give
the delays its hand-written loop gave before."""

from __future__ import annotations

import math
from itertools import islice

import pytest

from herdbook.agent.alloc_follow import CATCH_UP_RETRY
from herdbook.agent.connection import APPEND_RETRY as AGENT_APPEND_RETRY
from herdbook.agent.connection import CONNECT_RETRY
from herdbook.agent.executor import REPORT_RETRY
from herdbook.agent.reports import HEALTH_RETRY
from herdbook.backoff import Backoff
from herdbook.control.instances import PROVISION_RETRY
from herdbook.events.store import CODE_RETRY, TIMEOUT_RETRY
from herdbook.history.repairs_live import SEED_RETRY
from herdbook.reactors.declarations import APPEND_RETRY, APPEND_RETRY_MAX


def test_doubling_up_to_the_cap() -> None:
    backoff = Backoff(0.5, cap=10.0)
    assert list(islice(backoff.delays(), 7)) == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.next() == 0.5
    assert backoff.next(8.0) == 10.0
    assert [backoff.nth(a) for a in range(7)] == list(islice(backoff.delays(), 7))


def test_a_step_adds_and_no_cap_grows_without_end() -> None:
    assert list(islice(Backoff(1.0, factor=1.0, step=1.0).delays(), 4)) == [1, 2, 3, 4]
    assert Backoff(1.0).nth(40) == 2.0 ** 40
    assert Backoff(1.0).cap == math.inf


def test_a_first_above_the_cap_is_capped() -> None:
    assert Backoff(5.0, cap=2.0).next() == 2.0


@pytest.mark.parametrize("bad", [{"first": -1.0}, {"first": 1.0, "factor": 0.5},
                                 {"first": 1.0, "step": -0.1}, {"first": 1.0, "cap": -1.0}])
def test_a_backoff_that_would_shrink_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="never shrinks"):
        Backoff(**bad)


def test_a_backoff_is_a_frozen_value() -> None:
    assert Backoff(0.5, cap=10.0) == Backoff(0.5, 2.0, 0.0, 10.0)
    with pytest.raises(AttributeError):
        Backoff(1.0).first = 2.0  # type: ignore[misc]


def test_each_site_keeps_the_delays_it_had() -> None:
    """The formulas the sites wrote by hand before ``Backoff``."""
    def doubling(first: float, cap: float, n: int) -> list[float]:
        out, delay = [], first
        for _ in range(n):
            out.append(delay)
            delay = min(delay * 2, cap)
        return out

    for site in (CONNECT_RETRY, AGENT_APPEND_RETRY, REPORT_RETRY, CATCH_UP_RETRY):
        assert list(islice(site.delays(), 8)) == doubling(0.5, 10.0, 8)
    assert list(islice(APPEND_RETRY.delays(), 8)) == doubling(1.0, 60.0, 8)
    assert APPEND_RETRY_MAX == 60.0
    # instances: min(300, previous-or-2.5 * 2)
    delay: float | None = None
    old = 2.5
    for _ in range(9):
        delay, old = PROVISION_RETRY.next(delay), min(300.0, old * 2)
        assert delay == old
    for attempt in range(4):
        assert HEALTH_RETRY.nth(attempt) == pytest.approx(0.5 * (attempt + 1))
    for attempt in range(20):
        assert TIMEOUT_RETRY.nth(attempt) == pytest.approx(0.2 * (attempt + 1))
        assert CODE_RETRY.nth(attempt) == pytest.approx(0.05 * (attempt + 1))
    for attempt in range(1, 25):
        assert SEED_RETRY.nth(attempt - 1) == pytest.approx(min(30.0, 2.0 * attempt))
