"""``GET /v1/fleet``'s rows (``web/fleet_rows.py``, issue 28 item 1): the table's columns from
the view, the GPU numbers from the latest telemetry sample. Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from herdbook.events.alloc import AllocStatus
from herdbook.events.health_report import GpuVerdict
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.events.telemetry import GpuReading, GpuTelemetry
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.telemetry_intake import Sample
from herdbook.web.fleet_rows import FLEET_COLUMNS, gpu_numbers, gpus_healthy, live_allocs, static_row

AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
XID = GpuVerdict(level="fatal", reason="fatal-xid: XID 79 on GPU 1", kind="xid", xid=79)


def view(health: Health = Health.HEALTHY, verdicts: dict[int, GpuVerdict] | None = None) \
        -> NodeView:
    return NodeView(id="g1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                    lifecycle=Lifecycle.READY, health=health, intent=Intent.CORDONED,
                    info=NodeInfo(labels={"pool": "h100", "rack": "r1"},
                                  gpus=tuple(GpuInfo(index=i, uuid=f"u{i}", name="H100")
                                             for i in range(4))),
                    gpus=verdicts or {}, last_event="node.cordoned", updated_at=AT)


def sample(*readings: GpuReading) -> Sample:
    return Sample(GpuTelemetry(node_id="g1", boot_id="b", gpus=readings), 0.0, True)


def test_a_row_names_every_static_column_in_order() -> None:
    row = dict(zip(FLEET_COLUMNS, static_row(view(Health.UNHEALTHY, {1: XID}), {"g1": 2}),
                   strict=False))
    assert row == {"id": "g1", "state": "UNHEALTHY", "health": "UNHEALTHY", "pool": "h100",
                   "class": "standard", "labels": {"pool": "h100", "rack": "r1"},
                   "schedulable": False, "gpus": 4, "approval": "APPROVED",
                   "intent": "CORDONED", "gpus_healthy": 3, "allocs": 2,
                   "last_event": "node.cordoned", "last_event_at": AT.isoformat()}


def test_gpus_healthy_is_unknown_before_any_verdict_not_zero() -> None:
    assert gpus_healthy(view(Health.UNKNOWN)) is None
    assert gpus_healthy(view(Health.HEALTHY)) == 4


def test_gpu_numbers_are_the_hottest_and_the_mean_of_those_measured() -> None:
    assert gpu_numbers(None) == (None, None)
    assert gpu_numbers(sample(GpuReading(index=0))) == (None, None)   # no sensor: not 0
    both = sample(GpuReading(index=0, temperature_c=61.0, gpu_util_pct=90.0),
                  GpuReading(index=1, temperature_c=95.0),
                  GpuReading(index=2, temperature_c=40.0, gpu_util_pct=15.0))
    assert gpu_numbers(both) == (95.0, 52.5)


def test_live_allocations_count_per_node_without_terminal_ones() -> None:
    def alloc(i: int, node: str, status: AllocStatus) -> AllocView:
        return AllocView(id=f"a{i}", job_id="j", node_id=node, eval_id="e", index=i,
                         command=["x"], status=status)
    assert live_allocs([alloc(1, "g1", AllocStatus.RUNNING), alloc(2, "g1", AllocStatus.PENDING),
                        alloc(3, "g1", AllocStatus.COMPLETE), alloc(4, "g2", AllocStatus.LOST)]) \
        == {"g1": 2}
