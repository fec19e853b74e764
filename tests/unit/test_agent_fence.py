"""One node id, one live agent (issue 26 item 1): the pure rules of the fence, the
control plane's conflict detection and the fold's label merge, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from herdbook.agent.fence import Signal, foreign, holder_message, silent_enough, taken_over_by
from herdbook.events.heartbeat import AgentId, Heartbeat
from herdbook.events.node import NodeBootStarted, NodeInfo, NodeInfoUpdated, NodeRegistered
from herdbook.projector.node_fold import apply
from herdbook.projector.node_view import NodeView
from herdbook.reactors.heartbeat_intake import HeartbeatIntake
from herdbook.reactors.heartbeats import Admission
from tests.fakes import FakeClock

OLD = AgentId(host="rack1-07", pid=4242, since=1_764_000_000.0)
NEW = AgentId(host="rack9-01", pid=7, since=1_764_000_100.0)


def fold(*events: object) -> NodeView:
    view = None
    for seq, event in enumerate(events, start=1):
        view = apply(view, event, seq)  # type: ignore[arg-type]
    assert view is not None
    return view


# the newcomer's watch -----------------------------------------------------------------
@pytest.mark.parametrize(("first_age", "watched", "interval", "silent"), [
    (0.0, 29.9, 10.0, False),     # watched less than the timeout, no stored age to credit
    (0.0, 30.0, 10.0, True),      # a whole timeout of silence
    (25.0, 5.0, 10.0, False),     # the stored age is not believed before a beat was due
    (25.0, 16.0, 10.0, True),     # a beat was due (1.5 x 10 s + 1 s) and none came
    (3600.0, 2.0, None, False),   # an hour-old heartbeat, no interval known: watch it all
    (3600.0, 2.0, 0.5, True),     # ... a holder that beat every 0.5 s is gone
])
def test_a_holder_is_gone_only_after_a_timeout_of_silence(
        first_age: float, watched: float, interval: float | None, silent: bool) -> None:
    assert silent_enough(first_age, watched, 30.0, interval) is silent


def test_the_own_boots_of_the_state_dir_are_no_other_holder() -> None:
    signal = Signal(boot_id="b1", agent=OLD, stream_seq=3,
                    stored_at=datetime(2026, 1, 1, tzinfo=UTC))
    assert foreign(signal, ["b0", "b1"]) is None
    assert foreign(signal, ["b0"]) is signal
    assert foreign(None, []) is None


def test_the_refusal_names_the_holder_in_one_line() -> None:
    line = holder_message("gpu-2", "b1", OLD, "")
    assert line == ("node gpu-2 is held by a running agent (host rack1-07, pid 4242, since "
                    "2025-11-24T16:00:00Z): stop that agent first, or start this one with "
                    "another --node-id")
    assert "\n" not in line


def test_an_agent_stops_when_another_announces_itself_for_its_node() -> None:
    mine = NodeBootStarted(node_id="gpu-2", boot_id="b1", agent=OLD)
    theirs = NodeBootStarted(node_id="gpu-2", boot_id="b2", agent=NEW)
    reboot = NodeBootStarted(node_id="gpu-2", boot_id="b2", trigger="reboot")
    assert taken_over_by(mine, ["b1"]) is None
    assert taken_over_by(reboot, ["b1"]) is None
    why = taken_over_by(theirs, ["b1"])
    assert why is not None and "host rack9-01, pid 7" in why
    assert taken_over_by(NodeRegistered(node_id="gpu-2", boot_id="b3"), ["b1"]) is not None


# the fold ------------------------------------------------------------------------------
def test_registering_again_keeps_the_labels_it_does_not_name() -> None:
    view = fold(NodeRegistered(node_id="gpu-2", boot_id="b1", agent=OLD,
                               info=NodeInfo(labels={"rack": "r1", "zone": "b"})),
                NodeRegistered(node_id="gpu-2", boot_id="b2", agent=NEW,
                               info=NodeInfo(labels={"zone": "c", "new": "1"})))
    assert view.info.labels == {"rack": "r1", "zone": "c", "new": "1"}
    assert view.agent == NEW


def test_an_info_update_replaces_the_labels() -> None:
    """The agent's own --labels changed (same state dir): that is asking to drop one."""
    view = fold(NodeRegistered(node_id="gpu-2", boot_id="b1",
                               info=NodeInfo(labels={"rack": "r1", "zone": "b"})),
                NodeInfoUpdated(node_id="gpu-2", info=NodeInfo(labels={"rack": "r1"})))
    assert view.info.labels == {"rack": "r1"}


def test_the_announcing_agent_is_kept_in_the_view() -> None:
    view = fold(NodeRegistered(node_id="gpu-2", boot_id="b1", agent=OLD),
                NodeBootStarted(node_id="gpu-2", boot_id="b2", agent=NEW),
                NodeBootStarted(node_id="gpu-2", boot_id="b3", trigger="reboot"))
    assert view.agent == NEW


# the control plane's conflict --------------------------------------------------------
class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.nodes = {"gpu-2": fold(NodeRegistered(node_id="gpu-2", boot_id="b1", agent=OLD))}
        self.intake = HeartbeatIntake(None, self.nodes, self.clock,  # type: ignore[arg-type]
                                      lambda node_id, view: None, shards=1)
        self.seq = {"b1": 0, "b2": 0}

    def beat(self, boot: str, agent: AgentId) -> Admission:
        self.seq[boot] += 1
        return self.intake.accept(Heartbeat(node_id="gpu-2", boot_id=boot, seq=self.seq[boot],
                                            agent=agent), self.clock.monotonic())

    def announce(self, boot: str, agent: AgentId) -> None:
        view = self.nodes["gpu-2"]
        self.nodes["gpu-2"] = apply(view, NodeBootStarted(node_id="gpu-2", boot_id=boot,
                                                          agent=agent), view.version + 1)
        self.intake.known("gpu-2", self.nodes["gpu-2"])


def test_two_live_agents_for_one_node_are_a_conflict_while_both_speak() -> None:
    world = World()
    assert world.beat("b1", OLD) is Admission.ACCEPTED
    world.clock.advance(1)
    world.announce("b2", NEW)                 # an agent without the fence announced itself
    assert world.beat("b2", NEW) is Admission.ACCEPTED
    for _ in range(3):                        # ... and the first one goes on
        world.clock.advance(1)
        assert world.beat("b1", OLD) is Admission.REPLAY
        assert world.beat("b2", NEW) is Admission.ACCEPTED
    why = world.intake.agent_conflict("gpu-2", window=30)
    assert why is not None
    assert "host rack9-01, pid 7" in why and "host rack1-07, pid 4242" in why
    assert "3 heartbeats were dropped" in why

    world.clock.advance(31)                   # the first one stopped: over
    world.beat("b2", NEW)
    assert world.intake.agent_conflict("gpu-2", window=30) is None
    assert "gpu-2" not in world.intake.conflicts


def test_a_restart_is_no_conflict() -> None:
    """The old boot's last stray heartbeat, and the new boot heard before its announcement
    was folded: neither is two agents."""
    world = World()
    world.beat("b1", OLD)
    world.clock.advance(1)
    assert world.beat("b2", NEW) is Admission.UNANNOUNCED_BOOT    # before the announcement
    world.announce("b2", NEW)                                   # accepted now
    world.beat("b2", NEW)
    assert world.beat("b1", OLD) is Admission.REPLAY              # one late stray
    world.clock.advance(1)
    world.beat("b2", NEW)
    assert world.intake.agent_conflict("gpu-2", window=30) is None
