"""Repair episodes (``history/repairs.py``), given / when / then: given a node's events,
then these episodes, steps, durations, percentiles and availability."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from herdbook.events.health_report import GpuVerdict, NodeHealthChanged
from herdbook.events.instance import InstanceProvisioning
from herdbook.events.node import (
    GpuInfo,
    NodeApproved,
    NodeBootChecked,
    NodeBootStarted,
    NodeCordoned,
    NodeDegraded,
    NodeDeleted,
    NodeDown,
    NodeDrained,
    NodeDrainStarted,
    NodeEvent,
    NodeInfo,
    NodeRecovered,
    NodeRegistered,
    NodeTerminated,
    NodeUncordoned,
    NodeUndrained,
    NodeValidated,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Health
from herdbook.history import repairs
from herdbook.history.repair_episodes import RepairsState
from herdbook.history.repair_queries import availability, episodes, stats, summary
from herdbook.history.repairs import fold

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GPUS = tuple(GpuInfo(index=i, uuid=f"GPU-{i}", name="H100") for i in range(8))


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def ready(node: str = "n1", t: float = 0, pool: str = "a", gpus: int = 8) -> list[NodeEvent]:
    """A node registered, booted and approved at ``t``: in service."""
    info = NodeInfo(gpus=GPUS[:gpus], labels={"pool": pool} if pool else {})
    return [NodeRegistered(node_id=node, boot_id="b1", info=info, at=at(t)),
            NodeBootChecked(node_id=node, boot_id="b1", passed=True, at=at(t)),
            NodeApproved(node_id=node, actor="alice", at=at(t))]


def unhealthy(node: str, t: float, kind: str = "xid", xid: int = 79) -> NodeHealthChanged:
    return NodeHealthChanged(
        node_id=node, health=Health.UNHEALTHY, previous=Health.HEALTHY, level="fatal",
        reason=f"xid-fatal: XID {xid}", actor="classifier", at=at(t),
        gpus={3: GpuVerdict(level="fatal", rule="xid-fatal", kind=kind, xid=xid)})


def given_log(*events: Any) -> RepairsState:
    return fold(enumerate(events, start=1))


def repair(node: str = "n1", t: float = 100) -> list[NodeEvent]:
    """fault at t -> drain -> drained -> reboot -> back up -> operator uncordon (clears
    UNHEALTHY) and undrain."""
    return [unhealthy(node, t),
            NodeDrainStarted(node_id=node, actor="alice", at=at(t + 60)),
            NodeDrained(node_id=node, actor="agent", at=at(t + 300)),
            NodeBootStarted(node_id=node, trigger="reboot", actor="alice", at=at(t + 400)),
            NodeBootStarted(node_id=node, trigger="agent_started", boot_id="b2",
                            actor="agent", at=at(t + 700)),
            NodeBootChecked(node_id=node, boot_id="b2", passed=True, actor="agent",
                            at=at(t + 710)),
            NodeUncordoned(node_id=node, actor="alice", at=at(t + 850)),
            NodeUndrained(node_id=node, actor="alice", at=at(t + 900))]


# one episode ---------------------------------------------------------------------------
def test_a_fault_through_drain_reboot_and_uncordon_is_one_episode_with_each_step() -> None:
    state = given_log(*ready(), *repair())
    [episode] = state.closed
    assert episode.outcome == "back" and not state.open
    assert (episode.node_id, episode.pool, episode.kind, episode.xid, episode.gpus) == (
        "n1", "a", "xid", 79, 8)
    assert (episode.detected_at, episode.detected_by) == (at(100), "classifier")
    assert (episode.quarantined_at, episode.quarantine) == (at(100), "unhealthy")
    assert (episode.drained_at, episode.drained_by) == (at(400), "agent")
    assert (episode.remediated_at, episode.remediation, episode.remediated_by) == (
        at(500), "reboot", "alice")
    assert (episode.back_at, episode.back_by) == (at(1000), "alice")
    assert episode.durations() == {"time_to_quarantine": 0.0, "time_to_drain": 300.0,
                                   "time_in_repair": 900.0, "mttr": 900.0}
    assert [s.step for s in episode.steps] == [
        "detected", "quarantined", "drain_started", "drained", "boot_started",
        "boot_started", "boot_checked", "uncordoned", "undrained", "back_in_service"]


def test_a_degraded_sign_before_the_fault_is_when_it_was_detected() -> None:
    # given a DEGRADED verdict at 50 (still schedulable), UNHEALTHY at 100
    degraded = NodeHealthChanged(node_id="n1", health=Health.DEGRADED,
                                 previous=Health.HEALTHY, reason="ecc", at=at(50),
                                 actor="classifier")
    state = given_log(*ready(), degraded, *repair())
    [episode] = state.closed
    assert episode.detected_at == at(50)
    assert episode.quarantined_at == at(100)       # it took work until 100
    assert episode.durations()["time_to_quarantine"] == 50.0
    assert episode.durations()["mttr"] == 950.0


def test_a_sign_that_clears_opens_nothing() -> None:
    state = given_log(*ready(),
                      NodeDegraded(node_id="n1", heartbeat_age=40, at=at(10)),
                      NodeRecovered(node_id="n1", at=at(20)))
    assert not state.closed and not state.open and not state.signs


def test_a_lost_heartbeat_then_down_is_quarantined_when_the_node_went_degraded() -> None:
    state = given_log(*ready(),
                      NodeDegraded(node_id="n1", heartbeat_age=30, actor="sweeper", at=at(10)),
                      NodeDown(node_id="n1", heartbeat_age=90, actor="sweeper", at=at(70)),
                      NodeRecovered(node_id="n1", actor="sweeper", at=at(200)))
    [episode] = state.closed
    assert (episode.kind, episode.detected_at, episode.quarantined_at) == (
        "down", at(10), at(10))
    assert episode.quarantine == "degraded"
    assert (episode.remediation, episode.back_at) == ("recovered", at(200))


def test_a_fault_on_a_cordoned_node_is_quarantined_already() -> None:
    state = given_log(*ready(), NodeCordoned(node_id="n1", actor="bob", at=at(5)),
                      unhealthy("n1", 100))
    episode = state.open["n1"]
    assert (episode.quarantined_at, episode.quarantined_by, episode.quarantine) == (
        at(100), "bob", "already cordoned")


def test_a_node_not_yet_approved_has_no_episode() -> None:
    state = given_log(*ready()[:2], unhealthy("n1", 100))
    assert not state.open and not state.closed


def test_a_replaced_node_is_back_when_its_successor_serves() -> None:
    state = given_log(*ready("old"), unhealthy("old", 100),
                      NodeTerminated(node_id="old", actor="pools", at=at(200)),
                      InstanceProvisioning(instance_id="i2", pool="a", provider="fake",
                                           node_id="new", replaces="old", at=at(201)),
                      *ready("new", t=600))
    [episode] = state.closed
    assert (episode.remediation, episode.remediated_at) == ("replace", at(200))
    assert (episode.replaced_by, episode.back_at) == ("new", at(600))


def test_a_deleted_node_closes_its_episode_out_of_every_duration() -> None:
    state = given_log(*ready(), unhealthy("n1", 100),
                      NodeDeleted(node_id="n1", actor="alice", at=at(300)))
    [episode] = state.closed
    assert episode.outcome == "deleted" and episode.durations()["mttr"] is None
    assert summary(state.closed)["episodes"] == 0


def test_a_replay_of_an_event_already_folded_changes_nothing() -> None:
    events = [*ready(), *repair()]
    state = given_log(*events)
    for seq, event in enumerate(events, start=1):
        repairs.apply(state, event, seq)
    assert len(state.closed) == 1


def test_a_step_that_comes_with_an_earlier_clock_keeps_the_order() -> None:
    late = [unhealthy("n1", 100), NodeUncordoned(node_id="n1", actor="a", at=at(40))]
    [episode] = given_log(*ready(), *late).closed
    assert episode.back_at == at(100)


# the validation gate ---------------------------------------------------------------------
def validation(node: str, t: float, passed: bool, t_end: float) -> list[NodeEvent]:
    started = NodeValidationStarted(node_id=node, trigger="returned", check="dcgm",
                                    command=["dcgmi", "diag", "-r", "2"], timeout_s=600,
                                    alloc_id="v1", actor="validation", at=at(t))
    if passed:
        return [started, NodeValidated(node_id=node, alloc_id="v1", check="dcgm",
                                       actor="validation", at=at(t_end))]
    return [started, NodeValidationFailed(node_id=node, alloc_id="v1", check="dcgm",
                                          reason="dcgm exited 1: GPU 3 failed",
                                          actor="validation", at=at(t_end))]


def gated(*events: Any) -> RepairsState:
    return fold(enumerate(events, start=1), RepairsState(gated=frozenset({"returned"})))


def test_with_the_gate_a_returned_node_is_back_when_validated() -> None:
    fault = [unhealthy("n1", 100), NodeUncordoned(node_id="n1", actor="bob", at=at(200))]
    state = gated(*ready(), *fault, *validation("n1", 210, True, 500))
    [episode] = state.closed
    assert (episode.remediation, episode.remediated_at) == ("operator", at(200))
    assert (episode.validated_at, episode.validated_by) == (at(500), "validation")
    assert (episode.back_at, episode.durations()["mttr"]) == (at(500), 400.0)
    assert [s.step for s in episode.steps][-3:] == [
        "validation_started", "validated", "back_in_service"]
    # without the gate the same node was back at the uncordon
    [ungated] = given_log(*ready(), *fault, *validation("n1", 210, True, 500)).closed
    assert (ungated.back_at, ungated.validated_at) == (at(200), None)


def test_a_failed_validation_keeps_the_episode_open_and_a_pass_closes_it() -> None:
    fault = [unhealthy("n1", 100), NodeUncordoned(node_id="n1", actor="bob", at=at(200))]
    again = [NodeUncordoned(node_id="n1", actor="bob", at=at(900)),
             NodeValidationStarted(node_id="n1", trigger="returned", check="dcgm",
                                   command=["true"], timeout_s=600, alloc_id="v2",
                                   at=at(910)),
             NodeValidated(node_id="n1", alloc_id="v2", actor="validation", at=at(1000))]
    state = gated(*ready(), *fault, *validation("n1", 210, False, 500))
    assert not state.closed and "validation_failed" in [s.step for s in state.open["n1"].steps]
    [episode] = gated(*ready(), *fault, *validation("n1", 210, False, 500), *again).closed
    assert (episode.back_at, episode.validated_at) == (at(1000), at(1000))


def test_a_failed_validation_of_a_node_in_service_opens_an_episode() -> None:
    state = gated(*ready(), *validation("n1", 100, False, 400))
    episode = state.open["n1"]
    assert (episode.kind, episode.detected_at, episode.quarantine) == (
        "validation", at(400), "already validating")


def test_every_node_event_is_a_step_or_ignored() -> None:
    from herdbook.events.codec import EVENT_TYPES
    names = {cls.__struct_config__.tag.split(".", 1)[1] for cls in EVENT_TYPES  # type: ignore[union-attr]
             if issubclass(cls, NodeEvent)}
    assert not repairs.STEPS & repairs.IGNORED
    assert names - repairs.STEPS - repairs.IGNORED == set(), "add it to STEPS or IGNORED"
    assert repairs.FAULTS | set(repairs.REMEDIES) <= repairs.STEPS


# listing, percentiles, availability ---------------------------------------------------
def test_episodes_since_keep_the_open_and_those_ending_in_the_window() -> None:
    state = given_log(*ready("n1"), *ready("n2"), *repair("n1", 100), unhealthy("n2", 5000))
    assert [e.node_id for e in episodes(state)] == ["n1", "n2"]
    assert [e.node_id for e in episodes(state, at(2000))] == ["n2"]
    assert [e.node_id for e in episodes(state, kind="xid", pool="b")] == []


def test_percentiles_are_nearest_rank() -> None:
    assert stats([]) == {"count": 0, "p50": None, "p90": None, "p99": None, "max": None,
                         "mean": None}
    got = stats(float(v) for v in range(1, 101))
    assert (got["p50"], got["p90"], got["p99"], got["max"], got["mean"]) == (
        50.0, 90.0, 99.0, 100.0, 50.5)


def test_summary_groups_by_fleet_pool_and_kind() -> None:
    state = given_log(*ready("n1", pool="a"), *ready("n2", pool="b"), *repair("n1", 100),
                      *repair("n2", 2000))
    got = summary(state.closed)
    assert got["episodes"] == 2 and got["open"] == 0
    assert got["fleet"]["mttr"]["count"] == 2
    assert set(got["pools"]) == {"a", "b"} and set(got["kinds"]) == {"xid"}
    assert got["pools"]["a"]["time_to_drain"]["p50"] == 300.0


def test_availability_is_gpu_hours_in_service_over_gpu_hours_owned() -> None:
    # one 8-GPU node owned 0..3600, out of service 1800..2700
    state = given_log(*ready(), unhealthy("n1", 1800),
                      NodeUncordoned(node_id="n1", actor="a", at=at(2700)))
    got = availability(state, at(0), at(3600))
    assert (got["gpu_hours_owned"], got["gpu_hours_in_service"]) == (8.0, 6.0)
    assert got["availability"] == 0.75
    assert got["pools"]["a"]["availability"] == 0.75
    # a window inside the outage
    assert availability(state, at(1800), at(2700))["availability"] == 0.0


def test_availability_counts_node_hours_where_the_fleet_has_no_gpus() -> None:
    state = given_log(*ready(gpus=0), unhealthy("n1", 1800))
    got = availability(state, at(0), at(3600))
    assert got["gpu_hours_owned"] == 0.0 and got["availability"] == 0.5


# for every history ----------------------------------------------------------------------
MOVES = st.sampled_from(["unhealthy", "degraded_health", "lost", "down", "recovered",
                         "cordon", "uncordon", "drain", "drained", "undrain", "reboot", "boot",
                         "checked", "terminate", "delete", "register"])


def event_of(move: str, node: str, t: float) -> list[NodeEvent]:
    when = at(t)
    return {
        "unhealthy": [unhealthy(node, t)],
        "degraded_health": [NodeHealthChanged(node_id=node, health=Health.DEGRADED,
                                              previous=Health.HEALTHY, at=when)],
        "lost": [NodeDegraded(node_id=node, heartbeat_age=30, at=when)],
        "down": [NodeDown(node_id=node, at=when)],
        "recovered": [NodeRecovered(node_id=node, at=when)],
        "cordon": [NodeCordoned(node_id=node, at=when)],
        "uncordon": [NodeUncordoned(node_id=node, at=when)],
        "drain": [NodeDrainStarted(node_id=node, at=when)],
        "drained": [NodeDrained(node_id=node, at=when)],
        "undrain": [NodeUndrained(node_id=node, at=when)],
        "reboot": [NodeBootStarted(node_id=node, trigger="reboot", at=when)],
        "boot": [NodeBootStarted(node_id=node, boot_id=f"b{t}", at=when)],
        "checked": [NodeBootChecked(node_id=node, boot_id=f"b{t}", passed=True, at=when)],
        "terminate": [NodeTerminated(node_id=node, at=when)],
        "delete": [NodeDeleted(node_id=node, at=when)],
        "register": ready(node, t),
    }[move]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n1", "n2"]), MOVES,
                          st.floats(min_value=-30, max_value=600)), max_size=40))
def test_for_every_history_episodes_keep_their_steps_in_time_order(
        moves: list[tuple[str, str, float]]) -> None:
    events: list[NodeEvent] = [*ready("n1"), *ready("n2")]
    t = 0.0
    for node, move, step in moves:
        t += step      # a step may go back in time: the clocks of writers differ
        events += event_of(move, node, t)
    state = given_log(*events)
    for episode in [*state.closed, *state.open.values()]:
        times = [s.at for s in episode.steps]
        assert times == sorted(times), episode
        assert episode.detected_at <= episode.quarantined_at
        durations = episode.durations()
        assert all(v is None or v >= 0 for v in durations.values()), durations
        if episode.outcome == "back":
            assert episode.back_at is not None
            assert durations["mttr"] == (episode.back_at - episode.detected_at).total_seconds()
            assert episode.steps[-1].step == "back_in_service"
        # one open episode per node, and a node in service has none
        open_one = state.open.get(episode.node_id)
        assert open_one is None or repairs.in_service(state.views.get(episode.node_id)) is False
    ids = [e.id for e in [*state.closed, *state.open.values()]]
    assert len(ids) == len(set(ids))
    window = availability(state, at(-100), at(t + 1000))
    for row in [window, *window["pools"].values()]:
        assert row["gpu_hours_in_service"] <= row["gpu_hours_owned"] + 1e-9
        assert row["availability"] is None or 0.0 <= row["availability"] <= 1.0
