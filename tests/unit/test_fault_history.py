"""Fault history decides (issue 19 item 3): given a node's past health reports, when one
more arrives, then the default policy sees the history: the same recoverable XID 3 times
within 24 h on one GPU is critical (UNHEALTHY at once), and a GPU serial that took its
node out twice within a week keeps any node holding it out. Pure, FakeClock."""

from __future__ import annotations

from datetime import timedelta

from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport, NodeHealthChanged
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.health.fault_history import KEEP, NO_HISTORY, FaultHistory, serials_of
from herdbook.health.policy import Policy
from herdbook.projector.node_view import NodeView
from herdbook.reactors.health import decide_health
from tests.fakes import FakeClock

POLICY = Policy.load(None)
HOUR = 3600.0
GPU_CHECK = CheckResult(name="gpu", status="healthy")


def report(node: str, *events: GpuEvent, boot: str = "b1", n: int = 0) -> HealthReport:
    return HealthReport(report_id=f"{node}-{boot}-{n}", node_id=node, boot_id=boot,
                        checks=(GPU_CHECK,), events=events)


def xid(code: int, gpu: int = 2) -> GpuEvent:
    return GpuEvent(kind="xid", gpu=gpu, xid=code)


SERIALS = {i: f"GPU-serial-{i}" for i in range(4)}


def test_the_same_recoverable_xid_three_times_in_a_day_is_critical() -> None:
    clock = FakeClock()
    history = FaultHistory(clock)
    results = []
    for n in range(3):
        results.append(POLICY.classify_with(history, report("n1", xid(31), n=n), SERIALS))
        clock.advance(8 * HOUR)
    assert [v.result for v in results] == ["degraded", "degraded", "critical"]
    assert results[2].reasons[0].startswith("repeated-xid: XID 31 on GPU 2")
    # the health decider: UNHEALTHY at once, the node stays up to be drained
    view = NodeView(id="n1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=Health.DEGRADED, version=3)
    events, _ = decide_health(view, results[2], 0, 3, "n1-b1-2", 9)
    assert [(type(e), e.health) for e in events if isinstance(e, NodeHealthChanged)] == [
        (NodeHealthChanged, Health.UNHEALTHY)]


def test_spread_over_more_than_a_day_or_over_gpus_and_codes_they_do_not_add_up() -> None:
    clock = FakeClock()
    history = FaultHistory(clock)
    for event in (xid(31), xid(31, gpu=3), xid(13)):      # other GPU, other code
        assert POLICY.classify_with(history, report("n1", event), SERIALS).result == "degraded"
    clock.advance(25 * HOUR)
    assert POLICY.classify_with(history, report("n1", xid(31)), SERIALS).result == "degraded"
    assert POLICY.classify_with(history, report("n2", xid(31)), SERIALS).result == "degraded"
    clock.advance(HOUR)
    assert POLICY.classify_with(history, report("n1", xid(31)), SERIALS).result == "degraded"
    assert POLICY.classify_with(history, report("n1", xid(31)), SERIALS).result == "critical"


def test_without_a_history_a_rule_that_asks_for_one_sees_none() -> None:
    three = report("n1", xid(31), xid(31), xid(31))
    assert POLICY.classify(three).result == "degraded"
    assert POLICY.classify_with(FaultHistory(FakeClock()), three, SERIALS).result == "critical"
    assert NO_HISTORY.xid_count(2, 31, timedelta(hours=24)) == 0


def test_a_gpu_serial_that_took_its_node_out_twice_in_a_week_is_flagged_wherever_it_goes() -> None:
    clock = FakeClock()
    history = FaultHistory(clock)
    # node a holds the bad GPU as its GPU 1: XID 79 takes a out (twice on one boot: once)
    serials_a = {0: "GPU-good-a", 1: "GPU-bad"}
    for n in range(2):
        verdict = POLICY.classify_with(history, report("a", xid(79, gpu=1), n=n), serials_a)
        assert verdict.fatal and verdict.gpus == (1,)
    clock.advance(HOUR)
    # the replacement b got the same board back (GPU 0 now): one more pull, its second
    serials_b = {0: "GPU-bad", 1: "GPU-good-b"}
    assert POLICY.classify_with(history, report("b"), serials_b).result == "healthy"
    assert POLICY.classify_with(history, report("b", xid(48, gpu=0)), serials_b).at_once
    assert history.of("b", serials_b, clock.now().timestamp()).gpu_pulls(0, KEEP) == 2
    # the next node holding it is out at once, on a report with nothing wrong in it
    clock.advance(HOUR)
    serials_c = {3: "GPU-bad"}
    flagged = POLICY.classify_with(history, report("c"), serials_c)
    assert flagged.result == "critical"
    assert flagged.reasons == ("gpu-pulled-twice: gpu check healthy",)
    assert POLICY.classify_with(history, report("d"), {0: "GPU-good-a"}).result == "healthy"
    # a week later the pulls have aged out
    clock.advance(7 * 24 * HOUR)
    assert POLICY.classify_with(history, report("c", n=1), serials_c).result == "healthy"


def test_a_policy_sees_event_counts_by_kind_over_a_window() -> None:
    policy = Policy.parse("""\
version: 1
rules:
  - name: hot-often
    condition: event.kind == "thermal" && history.event_count(event.gpu, "thermal", duration("1h")) >= 2
    result: unhealthy
  - name: any-gpu-xids
    condition: event.kind == "xid" && history.xid_count(-1, event.xid, duration("30m")) >= 2
    result: critical
""")
    clock = FakeClock()
    history = FaultHistory(clock)
    hot = GpuEvent(kind="thermal", gpu=0, value=90.0)
    assert policy.classify_with(history, report("n", hot), SERIALS).result == "healthy"
    clock.advance(59 * 60)
    assert policy.classify_with(history, report("n", hot), SERIALS).result == "unhealthy"
    assert policy.classify_with(history, report("n", xid(13, gpu=0)), SERIALS).result == "healthy"
    assert policy.classify_with(history, report("n", xid(13, gpu=1)), SERIALS).result == "critical"


def test_the_history_keeps_a_week_and_replays_what_a_restart_read_again() -> None:
    clock = FakeClock()
    live = FaultHistory(clock)
    stored: list[tuple[HealthReport, float]] = []
    for n in range(2):
        r = report("n1", xid(94), n=n)
        stored.append((r, clock.now().timestamp()))
        POLICY.classify_with(live, r, SERIALS, stored[-1][1])
        clock.advance(HOUR)
    # a restart: the reports decided on before are replayed, deciding nothing
    rebuilt = FaultHistory(clock)
    for r, at in stored:
        POLICY.replay(rebuilt, r, SERIALS, at)
    third = report("n1", xid(94), n=2)
    assert POLICY.classify_with(rebuilt, third, SERIALS).result == "critical"
    old = FaultHistory(clock)
    old.record(report("n1", xid(94)), 0.0)
    old.record(report("n1", xid(94)), KEEP + 1.0)     # the first one goes
    assert len(old.faults["n1"]) == 1


def test_serials_come_from_the_nodes_info() -> None:
    info = NodeInfo(gpus=(GpuInfo(index=0, uuid="GPU-a", name="x"),
                          GpuInfo(index=1, uuid="GPU-b", name="x")))
    assert serials_of(info.gpus) == {0: "GPU-a", 1: "GPU-b"}
