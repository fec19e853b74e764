"""The console's charts, their pure halves (issue 28 item 4): the fleet over a window
folded from the event log (state counts, score, detections and recoveries), the
per-GPU telemetry ring (bounded, absent readings stay absent), the heartbeat-age
samples per bucket, and the window syntax."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from herdbook.events.node import NodeApproved, NodeBootChecked, NodeRegistered, NodeUncordoned
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.health.policy import Verdict
from herdbook.history.fleet_history import FleetTimeline, parse_window
from herdbook.history.reader import LogEntry
from herdbook.projector.as_of import fold_nodes
from herdbook.reactors.health import decide_health
from herdbook.reactors.telemetry_ring import ABSENT, TelemetryRing
from herdbook.web.timeline import AgeSeries, percentiles
from tests.unit.test_history import T0, log

MINUTE = timedelta(minutes=1)


def ready(*nodes: str) -> list[object]:
    return [e for n in nodes for e in (NodeRegistered(node_id=n), NodeApproved(node_id=n),
                                        NodeBootChecked(node_id=n, passed=True))]


def timeline_of(entries: list[LogEntry], start: datetime, end: datetime,
                buckets: int) -> dict[str, object]:
    timeline = FleetTimeline(start, end, buckets)
    for entry in entries:
        timeline.add(entry)
    return timeline.result()


def test_the_fleet_over_a_window_counts_states_and_each_detection_and_recovery() -> None:
    # n1, n2 READY before the window; XID 79 takes n1 down in minute 2; an operator's
    # uncordon-free recovery is not claimed: only what the fold shows counts.
    setup = ready("n1", "n2")
    entries = log(*setup, step=timedelta(seconds=1))          # stored T0+1s .. T0+6s
    before = fold_nodes(entries, T0 + MINUTE)[0]
    fatal = Verdict("fatal", ("fatal-xid: XID 79 on GPU 3",))
    events, _ = decide_health(before["n1"], fatal, 0, 3, report_id="r-79")
    start = T0 + MINUTE
    late = [LogEntry(100 + i, start + timedelta(seconds=90 + i), entries[0].subject, b"", e)
            for i, e in enumerate(events)]
    result = timeline_of(entries + late, start, start + 4 * MINUTE, 4)
    points = result["points"]
    assert isinstance(points, list) and len(points) == 4
    assert points[0]["states"] == {"READY": 2} and points[0]["detections"] == 0
    assert points[1]["detections"] >= 1                       # the minute of the XID
    assert points[1]["states"].get("READY") == 1               # n1 is no longer READY
    assert points[1]["score"] < points[0]["score"] == 100
    assert points[3]["states"] == points[1]["states"]          # nothing after: held
    assert result["detections"] == sum(p["detections"] for p in points)
    marks = result["marks"]
    assert isinstance(marks, list) and marks
    assert {m["node_id"] for m in marks} == {"n1"} and all(m["kind"] == "detection" for m in marks)
    assert any("XID 79" in m["reason"] for m in marks), marks
    # events before the window set the state but are not detections in it
    assert timeline_of(entries + late, start + 2 * MINUTE, start + 4 * MINUTE, 2)[
        "detections"] == 0


def test_a_fault_closed_by_an_event_is_a_recovery_in_its_bucket() -> None:
    entries = log(*ready("n1"))
    view = fold_nodes(entries, T0 + MINUTE)[0]["n1"]
    degraded = Verdict("degraded", ("thermal-warning: GPU 0 at 88 C",))
    hurt, _ = decide_health(view, degraded, 0, 1, report_id="r-1")
    start = T0 + MINUTE
    stored = [LogEntry(10 + i, start + timedelta(seconds=10), entries[0].subject, b"", e)
              for i, e in enumerate(hurt)]
    after = fold_nodes(entries + stored, start + MINUTE)[0]["n1"]
    healed, _ = decide_health(after, Verdict("healthy", ()), 0, 2, report_id="r-2")
    healed = healed or [NodeUncordoned(node_id="n1")]
    stored += [LogEntry(20 + i, start + timedelta(seconds=70), entries[0].subject, b"", e)
               for i, e in enumerate(healed)]
    result = timeline_of(entries + stored, start, start + 2 * MINUTE, 2)
    points = result["points"]
    assert isinstance(points, list)
    assert points[0]["detections"] >= 1 and points[1]["recoveries"] >= 1, points


def test_a_window_is_a_duration_from_a_minute_to_seven_days() -> None:
    assert parse_window("15m") == timedelta(minutes=15)
    assert parse_window("7d") == timedelta(days=7)
    for bad in ("", "1y", "0m", "30s", "8d", "-1h", "h"):
        with pytest.raises(ValueError, match="window"):
            parse_window(bad)


def sample(node: str, temps: list[float | None], power: float | None = 300.0) -> GpuTelemetry:
    return GpuTelemetry(node_id=node, boot_id="b", gpus=tuple(
        GpuReading(index=i, temperature_c=t, power_w=power, gpu_util_pct=50.0)
        for i, t in enumerate(temps)))


def test_the_ring_keeps_the_samples_per_gpu_with_absent_readings_absent() -> None:
    ring = TelemetryRing()
    for second, temp in enumerate([60.0, 61.4, 62.6, 95.0]):
        ring.add(sample("n1", [temp, 40.0], power=None if second == 3 else 300.0),
                 T + second)
    series = ring.series("n1")
    assert series["resolution"] == "samples" and series["step_s"] is None
    assert series["times"] == [T, T + 1, T + 2, T + 3]
    assert series["gpus"]["0"]["temperature_c"] == [60, 61, 63, 95]
    assert series["gpus"]["1"]["temperature_c"] == [40, 40, 40, 40]
    assert series["gpus"]["0"]["power_w"] == [300, 300, 300, None]  # not measured: None, not 0
    assert ring.series("n1", since=T + 3)["times"] == [T + 3]
    assert ring.series("nobody")["times"] == [] and ring.series("nobody")["gpus"] == {}
    ring.forget("n1")
    assert ring.series("n1")["times"] == []


def test_the_ring_is_bounded_by_the_fleet_not_by_what_is_published() -> None:
    ring = TelemetryRing()
    for i in range(0, 5000 * 60, 60):                # 3.5 days of minutes: every tier wraps
        ring.add(sample("n1", [60.0] * 8), T + i)
    one_node = ring.nbytes()
    # 798 slots x (4 B + 8 GPUs x 4 B) + 3 mean tiers' open sums (24 x (8 + 4) B)
    assert one_node == 798 * (4 + 8 * 4) + 3 * 24 * 12 == 29_592
    ring.add(sample("n2", [60.0] * 8), T)
    assert ring.nbytes() == 2 * one_node
    ring.add(sample("n1", [60.0] * 4), T + 10**6)      # GPUs changed: new rings
    assert ring.series("n1")["times"] == [T + 10**6] and ring.nbytes() < 2 * one_node
    assert ABSENT not in ring.series("n1")["gpus"]["0"]["power_w"]


# An injected clock: every sample's time is given, 30 s apart for 8 days.
T = 1_800_000_000 // 3600 * 3600         # on the hour: buckets of every tier start at T
DAY = 86_400


def test_every_window_of_the_picker_is_filled_from_the_tier_that_reaches_back() -> None:
    ring = TelemetryRing()
    now = T + 8 * DAY
    for at in range(T, now + 1, 30):
        minute = (at - T) // 60
        ring.add(sample("n1", [40.0 + minute % 2 * 10, 70.0]), at)   # 40, 50, 40 ... by minute
    expected = {"15m": ("samples", 30, 31), "1h": ("1-minute means", 60, 61),
                "6h": ("1-minute means", 60, 361), "24h": ("10-minute means", 600, 145),
                "7d": ("1-hour means", 3600, 169)}
    for window, (resolution, step, points) in expected.items():
        since = now - parse_window(window).total_seconds()
        series = ring.series("n1", since)
        times = series["times"]
        assert series["resolution"] == resolution, window
        assert times[0] <= since + step and times[0] + step >= since, (window, times[0] - since)
        assert times[-1] >= now - step and len(times) == points, (window, len(times))
        assert None not in series["gpus"]["1"]["temperature_c"], window     # no gap
        assert series["kept_from"] <= since
    minutes = ring.series("n1", now - 3600)["gpus"]["0"]["temperature_c"]
    assert set(minutes[:-1]) == {40, 50}               # a 1-minute mean: its minute's value
    assert set(ring.series("n1", now - DAY)["gpus"]["0"]["temperature_c"][:-1]) == {45}


def test_a_mean_is_of_the_readings_measured_and_a_silent_node_is_a_gap() -> None:
    ring = TelemetryRing()
    for at, temp, power in ((T, 60.0, None), (T + 30, 64.0, 300.0), (T + 45, None, None),
                            (T + 60, 70.0, None), (T + 6 * 60, 80.0, None)):  # 4 silent minutes
        ring.add(sample("n1", [temp], power=power), at)
    # a young ring (its samples never wrapped) holds every sample: those, and it says so
    young = ring.series("n1", T - 3600)
    assert young["resolution"] == "samples" and len(young["times"]) == 5
    assert young["kept_from"] == T > T - 3600
    for i in range(120):                          # the samples wrap: back to T is means now
        ring.add(sample("n1", [90.0], power=None), T + 7 * 60 + i)
    series = ring.series("n1", T)
    assert series["resolution"] == "1-minute means" and series["step_s"] == 60
    gpu = series["gpus"]["0"]
    assert series["times"][:4] == [T, T + 60, T + 120, T + 360]  # one gap point, then minute 6
    assert gpu["temperature_c"][:4] == [62, 70, None, 80]        # the mean of 60 and 64
    assert gpu["power_w"][:4] == [300, None, None, None]         # measured once: that once
    assert gpu["temperature_c"][-1] == 90                        # the open minute, so far


def test_heartbeat_ages_per_bucket_are_the_last_sample_in_it_or_none() -> None:
    assert percentiles([]) is None
    assert percentiles([float(i) for i in range(1, 101)]) == (51.0, 100.0, 100.0)
    ages = AgeSeries(size=10)
    t0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC).timestamp()
    ages.add(t0 + 5, [1.0, 2.0, 3.0])
    ages.add(t0 + 50, [4.0, 4.0])
    ages.add(t0 + 50, [9.0])                         # not after the last: dropped
    start = datetime.fromtimestamp(t0, UTC)
    out = ages.buckets(start, start + timedelta(seconds=90), 3)
    assert out == [{"p50": 2.0, "p99": 3.0, "max": 3.0}, {"p50": 4.0, "p99": 4.0, "max": 4.0},
                   None]
