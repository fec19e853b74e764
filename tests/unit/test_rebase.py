"""The view after HERD_EVENTS was lost and created again from ``first_seq``: every
version from the lost history is 0 (what the new stream's subjects say), every row kept,
and what the new stream already holds keeps its version."""

from __future__ import annotations

from herdbook.events.alloc import AllocPlaced
from herdbook.events.breaker_events import BreakerReset
from herdbook.events.eval_events import EvalCreated, Trigger
from herdbook.events.job_events import JobRegistered, JobSpec
from herdbook.events.node import NodeApproved, NodeDeclared
from herdbook.projector.rebase import rebase
from herdbook.projector.tables import ReadModel
from herdbook.reactors.breaker import BreakerFold
from herdbook.reactors.breaker_deciders import fold


def versions(model: ReadModel) -> dict[str, int]:
    return {**{f"node:{k}": v.version for k, v in model.nodes.items()},
            **{f"alloc:{k}": v.version for k, v in model.allocs.items()},
            **{f"eval:{k}": v.version for k, v in model.evals.items()},
            **{f"job:{k}": v.version for k, v in model.jobs.items()},
            **{f"allocs-of:{k}": v for k, v in model.alloc_versions.items()}}


def test_versions_before_the_new_first_sequence_are_zero_and_later_ones_kept() -> None:
    model = ReadModel()
    model.fold(1, NodeDeclared(node_id="old"))
    model.fold(2, NodeApproved(node_id="old"))
    model.fold(3, NodeDeclared(node_id="both"))
    model.fold(4, EvalCreated(eval_id="e1", job_id="j", triggered_by=Trigger.JOB_REGISTER))
    model.fold(5, AllocPlaced(node_id="old", alloc_id="a1", job_id="j", eval_id="e1", index=0,
                              command=["true"]))
    model.fold(6, JobRegistered(job_id="j", spec=JobSpec(id="j", command=["true"])))
    # the stream is lost after 5 and created again from 8; "both" gets an event at 8
    model.fold(8, NodeApproved(node_id="both"))
    for table in model.tables():
        table.take_dirty()

    changed = rebase(model, first_seq=8)

    assert versions(model) == {"node:old": 0, "node:both": 8, "alloc:a1": 0, "eval:e1": 0,
                               "job:j": 0, "allocs-of:old": 0}
    assert changed == 5
    # every row is kept, and the changed ones are written with the next commit
    assert model.nodes["old"].approval.value == "APPROVED"
    assert model.nodes.take_dirty() == {"old"}
    assert model.allocs.take_dirty() == {"a1"}
    # a second rebase (the next start sees the same stream) changes nothing
    assert rebase(model, first_seq=8) == 0


def test_a_rebase_tells_no_listener() -> None:
    model = ReadModel()
    model.fold(1, NodeDeclared(node_id="n"))
    heard: list[str] = []
    model.nodes.subscribe(lambda key, row, event: heard.append(key))
    rebase(model, first_seq=5)
    assert heard == [] and model.nodes["n"].version == 0


def test_the_breakers_version_from_the_lost_history_is_zero() -> None:
    """The breaker folds ``herd.breaker.>`` itself: a trip or reset after the loss must
    expect the new stream's version of its subject (none), not the old one."""
    breaker = BreakerFold(nc=None)  # type: ignore[arg-type]
    breaker.state = fold(breaker.state, BreakerReset(scope="fleet", reason="r"), 5)
    breaker.rebase(first_seq=3)       # a stream that goes on before it: nothing to do
    assert breaker.state.version == 5
    breaker.rebase(first_seq=8)
    assert breaker.state.version == 0 and breaker.state.reset_at
