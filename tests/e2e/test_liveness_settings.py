"""No silent flapping (issue 16, item 5), across real processes: `herd up` publishes its
liveness settings; a `herd agent` without --heartbeat-interval heartbeats every third of
the heartbeat timeout; one with an interval that cannot keep its node READY says so in
one line at start, and `herd node describe` shows the interval, the timeout and why."""

from __future__ import annotations

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.conftest import Fleet

pytestmark = pytest.mark.e2e

CONFIG = """
lifecycle:
  heartbeat_timeout: 3s
  heartbeat_timeout_sensitive: 9s
"""


def test_the_default_interval_derives_from_the_plane_and_a_bad_one_is_warned_once(
        fleet: Fleet) -> None:
    fleet.up(CONFIG)
    fleet.spawn("derived", "agent", "--server", fleet.url, "--node-id", "derived",
                "--state-dir", str(fleet.tmp / "derived"), "--fake-gpus", "1")
    fleet.spawn("derived-s", "agent", "--server", fleet.url, "--node-id", "derived-s",
                "--state-dir", str(fleet.tmp / "derived-s"), "--fake-gpus", "1",
                "--class", "sensitive")
    fleet.agent("slow", "--heartbeat-interval", "2s")
    fleet.agent("late", "--heartbeat-interval", "3000ms")

    def reported(node_id: str) -> dict[str, object] | None:
        described = fleet.describe(node_id) if node_id in fleet.nodes() else None
        return described if described and described["heartbeat_interval"] else None

    derived = wait_until(lambda: reported("derived"), what="derived's interval reported")
    assert derived["heartbeat_interval"] == 1.0 and derived["heartbeat_timeout"] == 3.0
    assert derived["heartbeat_warning"] is None
    assert derived["heartbeat"]["interval"] == 1.0  # type: ignore[index]
    sensitive = wait_until(lambda: reported("derived-s"), what="derived-s's interval")
    assert (sensitive["heartbeat_interval"], sensitive["heartbeat_timeout"]) == (3.0, 9.0)
    assert sensitive["heartbeat_warning"] is None

    slow = wait_until(lambda: reported("slow"), what="slow's interval reported")
    assert slow["heartbeat_interval"] == 2.0 and slow["heartbeat_timeout"] == 3.0
    assert "leaves no margin" in str(slow["heartbeat_warning"])
    late = wait_until(lambda: reported("late"), what="late's interval reported")
    assert "not shorter than the heartbeat timeout 3s" in str(late["heartbeat_warning"])
    table = herd("node", "describe", "slow", server=fleet.url, check=True).stdout
    assert "leaves no margin" in table

    def log(name: str) -> list[str]:
        return (fleet.tmp / f"{name}.log").read_text().splitlines()

    for name, words in (("slow", "leaves no margin"), ("late", "not shorter than")):
        warned = [line for line in log(name) if "WARNING" in line]
        assert len(warned) == 1 and words in warned[0], warned
    for name in ("derived", "derived-s"):
        assert not [line for line in log(name) if "WARNING" in line], log(name)
