"""The fleet health score: given node views, then one number and its breakdown."""

from __future__ import annotations

from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView
from herdbook.projector.score import fleet_score


def node(i: int, gpus: int = 8, **kw: object) -> NodeView:
    info = NodeInfo(gpus=tuple(GpuInfo(index=g, uuid=f"u{i}-{g}", name="H100")
                               for g in range(gpus)))
    fields: dict[str, object] = {"approval": Approval.APPROVED, "lifecycle": Lifecycle.READY,
                                 "health": Health.HEALTHY, **kw}
    return NodeView(id=f"n{i}", type=NodeType.COMPUTE, info=info, **fields)  # type: ignore[arg-type]


def test_a_good_fleet_scores_100() -> None:
    score = fleet_score([node(i) for i in range(4)])
    assert (score.score, score.nodes, score.gpus, score.faults) == (100, 4, 32, {})


def test_an_empty_fleet_scores_100_with_nothing_in_it() -> None:
    score = fleet_score([])
    assert (score.score, score.nodes) == (100, 0)


def test_unhealthy_gpus_and_unschedulable_nodes_lower_the_score() -> None:
    views = [node(0, health=Health.UNHEALTHY), node(1, intent=Intent.CORDONED), node(2),
             node(3, lifecycle=Lifecycle.DOWN)]
    score = fleet_score(views)
    assert score.gpus_healthy == 0.5          # n0 unhealthy, n3 down: 16 of 32 GPUs
    assert score.schedulable == 0.25          # only n2
    assert score.score == 38                  # round(100 * 0.75 / 2)
    assert score.faults == {"down": 1, "unhealthy": 1}


def test_gpus_weigh_by_count_and_a_cpu_fleet_counts_nodes() -> None:
    views = [node(0, gpus=1, health=Health.DEGRADED), node(1, gpus=3)]
    assert fleet_score(views).gpus_healthy == 0.75
    cpu = [node(0, gpus=0, health=Health.UNHEALTHY), node(1, gpus=0)]
    assert fleet_score(cpu).gpus_healthy == 0.5


def test_pending_requester_and_terminated_nodes_are_not_the_fleet() -> None:
    views = [node(0), node(1, approval=Approval.PENDING), node(2, lifecycle=Lifecycle.TERMINATED),
             NodeView(id="r", type=NodeType.REQUESTER, approval=Approval.APPROVED,
                      lifecycle=Lifecycle.DOWN)]
    score = fleet_score(views)
    assert (score.nodes, score.score, score.faults) == (1, 100, {})


def test_a_validating_node_is_neither_healthy_nor_schedulable_nor_a_fault() -> None:
    # READY and HEALTHY underneath, but its validation check runs: not proven yet
    views = [node(0, validation="running"), node(1), node(2, validation="passed")]
    score = fleet_score(views)
    assert score.gpus_healthy == round(2 / 3, 4)
    assert score.schedulable == round(2 / 3, 4)
    assert (score.validating, score.faults) == (1, {})


def test_a_node_waiting_for_its_validation_slot_is_out_of_service_too() -> None:
    """The gate holds a due node (READY, HEALTHY, ELIGIBLE) until a slot frees: the
    scheduler skips it, so the score must not count it healthy or schedulable."""
    from herdbook.config import parse_config
    from herdbook.reactors.validation_deciders import validation_waiting

    views = [node(0), node(1, validation_due="returned"), node(2), node(3)]
    assert fleet_score(views).schedulable == 1.0               # no gate: nothing waits
    config = parse_config("validation: {command: ['true'], max_concurrent: 1}\n")
    waiting = validation_waiting(config)
    assert waiting is not None
    score = fleet_score(views, waiting)
    assert (score.validation_waiting, score.validating, score.faults) == (1, 0, {})
    assert score.gpus_healthy == 0.75 and score.schedulable == 0.75
    assert validation_waiting(parse_config("{}\n")) is None    # no gate configured
