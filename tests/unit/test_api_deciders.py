"""The API's business rules, pure: given views, when an operator's command is decided,
then these events at this version, or this refusal. No store, no server."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from herdbook.api.commands import BY_NAME, decide_verb
from herdbook.api.deciders import (
    decide_add_node,
    decide_new_eval,
    decide_register_job,
    decide_requeue_alloc,
    decide_retry_eval,
    decide_scale_pool,
    decide_stop_job,
)
from herdbook.api.lookup import ApiError
from herdbook.api.messages import NodeCommand
from herdbook.config import PoolConfig
from herdbook.events.alloc import AllocRequeueApproved, AllocStatus
from herdbook.events.eval_events import EvalCreated
from herdbook.events.evals import EvalStatus, EvalTrigger
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec
from herdbook.events.node import NodeCordoned, NodeDeclared
from herdbook.events.states import Approval, Lifecycle, NodeClass, NodeType
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.eval_view import EvalView
from herdbook.projector.job_view import JobView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.decide_runner import Context
from herdbook.reactors.refused import AlreadyDone, CommandRefused

NOW = Context(now=datetime(2026, 11, 23, 12, 0, tzinfo=UTC), new_id=lambda: "fresh")
NODE = NodeView(id="n1", type=NodeType.COMPUTE, approval=Approval.APPROVED,
                lifecycle=Lifecycle.READY, version=7)
SPEC = JobSpec(id="train", command=["python", "train.py"], priority=70)
JOB = JobView(id="train", spec=SPEC, version=11)
NO_FACTS: Any = SimpleNamespace()   # a cordon reads no facts: any read is an AttributeError
LOST = AllocView(id="a1", job_id="train", node_id="n1", eval_id="e0", index=0,
                 command=["x"], status=AllocStatus.LOST, requeue_allowed=False)


def test_a_node_command_decides_on_the_view_at_its_version() -> None:
    decision = decide_verb(BY_NAME["cordon"], NODE, NodeCommand(id="n1", reason="fan"), "ana",
                           NO_FACTS, NOW)
    [event] = decision.events
    assert decision.expected == 7
    assert isinstance(event, NodeCordoned) and (event.actor, event.reason) == ("ana", "fan")


def test_a_node_command_on_no_node_is_not_found() -> None:
    with pytest.raises(ApiError) as err:
        decide_verb(BY_NAME["cordon"], None, NodeCommand(id="n9"), "ana", NO_FACTS, NOW)
    assert err.value.code == "not_found" and str(err.value) == "node n9 not found"


def test_adding_a_node_declares_it_at_the_aggregates_last_sequence() -> None:
    # a deleted node has events but no view: its last sequence is the expected version
    decision = decide_add_node(None, 42, "n2", actor="ana", reason="racked",
                               node_class=NodeClass.SENSITIVE, labels={"rack": "r9"},
                               context=NOW)
    [event] = decision.events
    assert decision.expected == 42
    assert isinstance(event, NodeDeclared)
    assert (event.node_id, event.node_class, event.labels) == ("n2", NodeClass.SENSITIVE,
                                                                {"rack": "r9"})


def test_adding_a_node_that_exists_is_refused() -> None:
    with pytest.raises(CommandRefused, match="node n1 already exists"):
        decide_add_node(NODE, 7, "n1", actor="ana", reason="", node_class=NodeClass.STANDARD,
                        labels={}, context=NOW)


def test_registering_a_job_expects_its_version_or_none() -> None:
    new = decide_register_job(None, SPEC, actor="ana", context=NOW)
    again = decide_register_job(JOB, SPEC, actor="ana", context=NOW)
    assert (new.expected, again.expected) == (0, 11)
    assert all(isinstance(d.events[0], JobRegistered) for d in (new, again))


def test_stopping_a_job_deregisters_it_once() -> None:
    decision = decide_stop_job(JOB, "train", actor="ana", reason="done", context=NOW)
    [event] = decision.events
    assert decision.expected == 11 and isinstance(event, JobDeregistered)
    # stopped already: done, not refused (exit 0), the state in the message
    with pytest.raises(AlreadyDone) as done:
        decide_stop_job(JobView(id="train", spec=SPEC, status="dead", stop_reason="done"),
                        "train", actor="ana", reason="", context=NOW)
    assert str(done.value) == "job train already stopped (status dead, reason: done)"
    with pytest.raises(ApiError, match="job nope not found"):
        decide_stop_job(None, "nope", actor="ana", reason="", context=NOW)


def test_a_new_eval_is_a_new_aggregate_caused_by_the_command() -> None:
    decision = decide_new_eval("e1", "train", EvalTrigger.JOB_REGISTER, priority=70,
                               actor="ana", cause="registered-id", context=NOW)
    [created] = decision.events
    assert decision.expected == 0
    assert isinstance(created, EvalCreated)
    assert (created.eval_id, created.job_id, created.priority, created.causation_id) == (
        "e1", "train", 70, "registered-id")


def test_only_a_failed_eval_is_retried() -> None:
    failed = EvalView(id="e1", job_id="train", status=EvalStatus.FAILED,
                      triggered_by=EvalTrigger.JOB_REGISTER, version=5)
    decision = decide_retry_eval(failed, "e1", actor="ana", reason="", context=NOW)
    [event] = decision.events
    assert decision.expected == 5 and event.reason == "retried by an operator"
    complete = EvalView(id="e2", job_id="train", status=EvalStatus.COMPLETE,
                        triggered_by=EvalTrigger.JOB_REGISTER)
    with pytest.raises(CommandRefused, match="only a failed eval can be retried") as err:
        decide_retry_eval(complete, "e2", actor="ana", reason="", context=NOW)
    assert not isinstance(err.value, AlreadyDone)


@pytest.mark.parametrize("status", [EvalStatus.PENDING, EvalStatus.DELAYED,
                                    EvalStatus.SCHEDULING, EvalStatus.APPLYING])
def test_retrying_an_eval_the_broker_holds_is_already_done(status: EvalStatus) -> None:
    """A retry sent twice finds the eval scheduling: done, exit 0, nothing appended."""
    held = EvalView(id="e1", job_id="train", status=status,
                    triggered_by=EvalTrigger.JOB_REGISTER)
    with pytest.raises(AlreadyDone) as done:
        decide_retry_eval(held, "e1", actor="ana", reason="", context=NOW)
    assert str(done.value) == f"eval e1 already {status.value}: the broker delivers it"


def test_requeueing_a_lost_allocation_expects_the_nodes_allocation_version() -> None:
    decision = decide_requeue_alloc(LOST, "a1", JOB, 33, actor="ana", reason="checked",
                                    context=NOW)
    [event] = decision.events
    assert decision.expected == 33
    assert isinstance(event, AllocRequeueApproved)
    assert (event.node_id, event.alloc_id, event.reason) == ("n1", "a1", "checked")


@pytest.mark.parametrize(("alloc", "job", "refusal"), [
    (AllocView(id="a1", job_id="train", node_id="n1", eval_id="e0", index=0, command=["x"],
               status=AllocStatus.RUNNING), JOB, "is running: only a lost one is requeued"),
    (LOST, None, "job train is stopped: nothing to requeue"),
    (LOST, JobView(id="train", spec=SPEC, status="dead"), "nothing to requeue"),
])
def test_requeue_refusals(alloc: AllocView, job: JobView | None, refusal: str) -> None:
    with pytest.raises(CommandRefused, match=refusal) as err:
        decide_requeue_alloc(alloc, "a1", job, 0, actor="ana", reason="", context=NOW)
    assert not isinstance(err.value, AlreadyDone)


def test_requeueing_an_allocation_allowed_to_requeue_is_already_done() -> None:
    """Approved before (a second requeue) or lost on a node that is not sensitive: the
    goal holds, and the message names the policy that decides what happens."""
    approved = AllocView(id="a1", job_id="train", node_id="n1", eval_id="e0", index=0,
                         command=["x"], status=AllocStatus.LOST, requeue_allowed=True,
                         status_reason="node lost; requeue approved by ana")
    with pytest.raises(AlreadyDone) as done:
        decide_requeue_alloc(approved, "a1", JOB, 0, actor="bob", reason="", context=NOW)
    assert str(done.value) == (
        "allocation a1 already allowed to requeue (node lost; requeue approved by ana); "
        "its job's policy decides: on_node_failure, at most 3 times")


def test_a_pool_scales_only_within_its_bounds() -> None:
    pool = PoolConfig(provider="fake", min_nodes=1, max_nodes=4)
    assert decide_scale_pool(pool, "gpu", 3, actor="ana", reason="", desired=None).size == 3
    assert decide_scale_pool(pool, "gpu", 3, actor="ana", reason="", desired=2).size == 3
    for size in (0, 5, None):
        with pytest.raises(CommandRefused, match="pool gpu takes 1 to 4 nodes"):
            decide_scale_pool(pool, "gpu", size, actor="ana", reason="", desired=2)
    with pytest.raises(ApiError, match="pool nope not found"):
        decide_scale_pool(None, "nope", 1, actor="ana", reason="", desired=None)


def test_scaling_a_pool_to_the_size_it_was_scaled_to_is_already_done() -> None:
    pool = PoolConfig(provider="fake", min_nodes=1, max_nodes=4)
    with pytest.raises(AlreadyDone, match="^pool gpu already scaled to 3$"):
        decide_scale_pool(pool, "gpu", 3, actor="ana", reason="", desired=3)
