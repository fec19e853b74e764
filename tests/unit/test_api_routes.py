"""The API's routes over the in-memory store and the one runner (no NATS): given past
events, when a request arrives, then these events and this reply; and the wire the
server and the CLI share."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

import msgspec
import pytest

from herdbook.api.allocs import AllocRoutes
from herdbook.api.jobs import JobRoutes
from herdbook.api.lookup import ApiError
from herdbook.api.messages import (
    ById,
    CommandResult,
    DrainNode,
    Envelope,
    ErrorCode,
    NodeDetail,
    NodeSummary,
    Ok,
    RegisterResult,
)
from herdbook.api.service import failure
from herdbook.events.alloc import AllocLost, AllocPlaced, AllocRequeueApproved
from herdbook.events.eval_events import EvalCreated
from herdbook.events.evals import EvalStatus, EvalTrigger
from herdbook.events.job_events import JobRegistered, JobSpec
from herdbook.events.store import StorageFullError
from herdbook.reactors.decide_runner import DecideRunner, KeptChanging
from herdbook.reactors.refused import CommandRefused
from tests.fakes import FakeClock, FakeProjector, FakeStore

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
SPEC = JobSpec(id="train", command=["python", "train.py"], priority=70)


class World:
    def __init__(self, attempts: int = 3) -> None:
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        ids = count(1)
        self.runner = DecideRunner(self.store, self.projector, FakeClock(T0),
                                   ids=lambda: f"id{next(ids)}", attempts=attempts)
        self.jobs = JobRoutes(self.projector, self.runner)  # type: ignore[arg-type]
        self.allocs = AllocRoutes(self.projector, self.runner)  # type: ignore[arg-type]


def body(**fields: Any) -> bytes:
    return msgspec.json.encode(fields)


async def test_registering_a_job_appends_it_then_its_eval_caused_by_it() -> None:
    world = World()
    reply = await world.jobs.job_register(body(spec=msgspec.to_builtins(SPEC), actor="ana"))
    [(registered, at), (created, eval_at)] = world.store.appended
    assert isinstance(registered, JobRegistered) and at == 0
    assert isinstance(created, EvalCreated) and eval_at == 0
    assert created.causation_id == registered.event_id
    assert created.triggered_by is EvalTrigger.JOB_REGISTER and created.priority == 70
    assert registered.at == created.at == T0
    assert isinstance(reply, RegisterResult) and reply.eval_id == created.eval_id
    assert reply.job.id == "train" and [e.id for e in reply.job.evals] == [created.eval_id]


async def test_a_job_registered_meanwhile_is_decided_again_from_its_new_version() -> None:
    world = World()
    world.store.race(JobRegistered(job_id="train", spec=SPEC, actor="bob"))
    await world.jobs.job_register(body(spec=msgspec.to_builtins(SPEC), actor="ana"))
    registered = [(e.actor, v) for e, v in world.store.appended if isinstance(e, JobRegistered)]
    assert registered == [("ana", world.projector.jobs["train"].version - 1)]
    assert world.projector.jobs["train"].job_version == 2


async def test_stopping_a_stopped_job_is_done_unchanged_and_appends_nothing() -> None:
    world = World()
    await world.jobs.job_register(body(spec=msgspec.to_builtins(SPEC)))
    first = await world.jobs.job_stop(body(id="train", reason="done"))
    appended = len(world.store.appended)
    again = await world.jobs.job_stop(body(id="train"))
    assert len(world.store.appended) == appended
    assert again.unchanged == "job train already stopped (status dead, reason: done)"
    assert again.status == "dead"
    # a stop that did something says nothing of the kind: the field is absent on the wire
    assert "unchanged" not in msgspec.to_builtins(first)
    assert msgspec.to_builtins(again)["unchanged"] == again.unchanged


async def test_retrying_an_eval_twice_is_done_unchanged_the_second_time() -> None:
    world = World()
    world.store.fold(EvalCreated(eval_id="e1", job_id="train", status=EvalStatus.FAILED,
                                 triggered_by=EvalTrigger.JOB_REGISTER))
    first = await world.jobs.eval_retry(body(id="e1"))
    appended = len(world.store.appended)
    again = await world.jobs.eval_retry(body(id="e1"))
    assert (first.status, first.unchanged) == (EvalStatus.SCHEDULING, msgspec.UNSET)
    assert len(world.store.appended) == appended
    assert again.unchanged == "eval e1 already scheduling: the broker delivers it"


async def test_requeueing_a_lost_allocation_approves_it_and_asks_for_a_placement() -> None:
    world = World()
    await world.jobs.job_register(body(spec=msgspec.to_builtins(SPEC)))
    world.store.fold(AllocPlaced(node_id="n1", alloc_id="a1", job_id="train", eval_id="e0",
                                 index=0, command=["x"]))
    world.store.fold(AllocLost(node_id="n1", alloc_id="a1", requeue_allowed=False))
    version = world.projector.alloc_versions["n1"]
    reply = await world.allocs.alloc_requeue(body(id="a1", reason="checked", actor="ana"))
    [(approved, at), (created, _)] = world.store.appended[-2:]
    assert isinstance(approved, AllocRequeueApproved) and at == version
    assert isinstance(created, EvalCreated)
    assert (created.triggered_by, created.node_id) == (EvalTrigger.NODE_UPDATE, "n1")
    assert reply.eval_id == created.eval_id and reply.alloc.id == "a1"
    # a second requeue: allowed already, done, no second approval nor evaluation
    appended = len(world.store.appended)
    again = await world.allocs.alloc_requeue(body(id="a1", reason="again", actor="bob"))
    assert len(world.store.appended) == appended
    assert again.eval_id == "" and isinstance(again.unchanged, str)
    assert again.unchanged.startswith("allocation a1 already allowed to requeue (")


class EveryoneFirst(FakeStore):
    """Another writer lands on the aggregate before every append of ours."""

    async def append(self, event: Any, expected_version: int | None = None) -> int:
        self.fold(JobRegistered(job_id="train", spec=SPEC, actor="bob"))
        return await super().append(event, expected_version)


async def test_an_aggregate_that_keeps_changing_answers_unavailable() -> None:
    world = World(attempts=2)
    world.store = EveryoneFirst(world.projector)
    world.runner.store = world.store
    with pytest.raises(KeptChanging) as err:
        await world.jobs.job_register(body(spec=msgspec.to_builtins(SPEC)))
    reply = failure(err.value, "herd.api.v1.job.register")
    assert reply.code is ErrorCode.UNAVAILABLE
    assert reply.error == "job train kept changing; try again"


@pytest.mark.parametrize(("error", "code"), [
    (ApiError("not_found", "node n9 not found"), ErrorCode.NOT_FOUND),
    (CommandRefused("no"), ErrorCode.REFUSED),
    (KeptChanging("node n1 kept changing; try again"), ErrorCode.UNAVAILABLE),
    (StorageFullError("NATS storage full"), ErrorCode.STORAGE_FULL),
    (msgspec.ValidationError("Expected `str`"), ErrorCode.BAD_REQUEST),
    (RuntimeError("boom"), ErrorCode.INTERNAL),
])
def test_every_error_is_one_reply_with_its_code(error: Exception, code: ErrorCode) -> None:
    assert failure(error, "herd.api.v1.x").code is code


# the wire -------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [
    b'{"id": "../etc"}', b'{"id": "n1", "reason": "extra"}', b'{}', b'{"id": 7}',
])
def test_a_request_that_breaks_its_routes_struct_is_a_validation_error(data: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(data, type=ById)


def test_a_drain_deadline_is_positive() -> None:
    with pytest.raises(msgspec.ValidationError, match="deadline_s"):
        msgspec.json.decode(b'{"id": "n1", "deadline_s": -1}', type=DrainNode)


def test_a_node_in_detail_is_its_summary_then_the_rest_and_class_keeps_its_name() -> None:
    summary = list(NodeSummary.__struct_encode_fields__)
    detail = list(NodeDetail.__struct_encode_fields__)
    assert detail[:len(summary)] == summary
    assert summary[:3] == ["id", "type", "class"]


def test_the_cli_reads_the_envelope_then_the_routes_reply() -> None:
    sent = msgspec.json.encode(Ok(result=CommandResult(event="node.cordoned", event_id="e",
                                                        seq=3, node=None)))
    envelope = msgspec.json.decode(sent, type=Envelope)
    assert envelope.ok and msgspec.json.decode(envelope.result, type=CommandResult).seq == 3
    refused = msgspec.json.decode(b'{"ok": false, "code": "refused", "error": "no"}',
                                  type=Envelope)
    assert (refused.ok, refused.code, refused.error) == (False, "refused", "no")
