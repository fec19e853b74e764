"""Why a job does not fit, in numbers and in sentences (issue 31 item 2): per constraint
and resource, with the largest free amount of the short resource, pure over views."""

from __future__ import annotations

from herdbook.events.states import NodeClass
from herdbook.reactors.placement_why import explain, summary
from tests.unit.test_placement import alloc, job, node


def test_a_job_asking_more_gpus_than_any_node_has_free_says_the_largest_free() -> None:
    nodes = [node(f"n{i}", gpus=8) for i in range(20)]
    nodes += [node("s1", gpus=8, node_class=NodeClass.SENSITIVE),
              node("s2", gpus=8, node_class=NodeClass.SENSITIVE)]
    why = explain(job(1, gpus=99), nodes, [])
    assert why["exhausted"] == {"gpus": 20}
    assert why["filtered"] == {"class=sensitive (not asked for)": 2}
    assert why["largest_free"]["gpus"] == {"free": 8, "nodes": 20}
    assert why["reasons"] == ["99 GPUs asked; largest free: 8 on 20 nodes; short on 20 nodes",
                              "2 nodes filtered by class=sensitive (not asked for)"]
    assert summary(why).startswith("99 GPUs asked; largest free: 8 on 20 nodes;")


def test_live_and_planned_allocations_use_what_they_take() -> None:
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    live = [alloc(0, node="n1", gpus=3)]
    why = explain(job(1, gpus=2), nodes, live, planned={"n2": 1}, unplaced=1)
    # n1 has 1 free, n2 2 after the plan's one: both short of 2? n2 fits one more
    assert why["largest_free"]["gpus"] == {"free": 2, "nodes": 1}
    assert (why["fit"], why["exhausted"], why["unplaced"]) == (1, {"gpus": 1}, 1)
    assert why["reasons"][-1] == "1 node now with room for one more"


def test_constraints_are_counted_under_the_first_one_a_node_fails() -> None:
    nodes = [node("b", node_class=NodeClass.BORROWED), node("g", labels={"rack": "r2"}),
             node("h", labels={"rack": "r1"}, gpus=0), node("p", schedulable=False)]
    why = explain(job(1, node_class="standard", labels={"rack": "r1"}), nodes, [])
    assert why["filtered"] == {"class=borrowed (wants standard)": 1, "label rack=r1": 1,
                               "node PENDING": 1}, why
    assert why["exhausted"] == {"gpus": 1}
    assert why["reasons"][0] == "1 GPU asked; largest free: 0 on 1 node; short on 1 node"
    why = explain(job(1, labels={"rack": "r1"}), nodes[1:2], [])
    assert why["exhausted"] == {} and why["largest_free"] == {}
    assert explain(job(1), [], [])["reasons"] == ["no compute nodes"]
