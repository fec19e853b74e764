"""Property: for any history of node, instance, eval, job, allocation and pool events, folding it in
random batches with a restart (reload from SQLite) between batches gives the same SQLite
view, in every table, as folding it all at once (DESIGN §9). The runner's own fold and
flush are used; no NATS server is needed for them."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herdbook.events.alloc import (
    AllocCompleted,
    AllocLost,
    AllocPlaced,
    AllocRunning,
    AllocStopRequested,
)
from herdbook.events.eval_events import EvalCreated, EvalLinked, EvalStatusChanged
from herdbook.events.evals import EvalStatus, Step
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.instance import (
    InstanceFailed,
    InstanceProvisioned,
    InstanceProvisioning,
    InstanceRunning,
    InstanceTerminated,
)
from herdbook.events.job_events import JobDeregistered, JobRegistered, JobSpec
from herdbook.events.node import (
    NodeApproved,
    NodeBootChecked,
    NodeCordoned,
    NodeDeleted,
    NodeRegistered,
    NodeTerminated,
)
from herdbook.events.pool import PoolScaled
from herdbook.projector.projection import ProjectorRunner

IDS = st.sampled_from(["a", "b", "c"])
SPEC = JobSpec(id="j", command=["true"])

EVENTS = st.one_of(
    IDS.map(lambda i: NodeRegistered(node_id=i)),
    IDS.map(lambda i: NodeApproved(node_id=i)),
    IDS.map(lambda i: NodeBootChecked(node_id=i, passed=True)),
    IDS.map(lambda i: NodeCordoned(node_id=i)),
    IDS.map(lambda i: NodeDeleted(node_id=i)),
    IDS.map(lambda i: NodeTerminated(node_id=i)),
    IDS.map(lambda i: InstanceProvisioning(instance_id=i, pool="p", provider="fake",
                                           node_id=i)),
    IDS.map(lambda i: InstanceProvisioned(instance_id=i, provider_ref="r")),
    IDS.map(lambda i: InstanceRunning(instance_id=i, node_id=i)),
    IDS.map(lambda i: InstanceFailed(instance_id=i, reason="x")),
    IDS.map(lambda i: InstanceTerminated(instance_id=i)),
    IDS.map(lambda i: EvalCreated(eval_id=i, job_id="j", triggered_by=Trigger.JOB_REGISTER)),
    IDS.map(lambda i: EvalStatusChanged(eval_id=i, step=Step.DEQUEUE,
                                        status=EvalStatus.SCHEDULING)),
    IDS.map(lambda i: EvalLinked(eval_id=i, next_eval="z")),
    IDS.map(lambda i: JobRegistered(job_id=i, spec=SPEC)),
    IDS.map(lambda i: JobDeregistered(job_id=i)),
    st.integers(0, 9).map(lambda n: PoolScaled(pool="p", size=n)),
    st.tuples(IDS, IDS).map(lambda t: AllocPlaced(node_id=t[0], alloc_id=t[1], job_id="j",
                                                  eval_id="e", index=0, command=["true"])),
    st.tuples(IDS, IDS).map(lambda t: AllocRunning(node_id=t[0], alloc_id=t[1], pid=7)),
    st.tuples(IDS, IDS).map(lambda t: AllocStopRequested(node_id=t[0], alloc_id=t[1])),
    st.tuples(IDS, IDS).map(lambda t: AllocCompleted(node_id=t[0], alloc_id=t[1])),
    st.tuples(IDS, IDS).map(lambda t: AllocLost(node_id=t[0], alloc_id=t[1])),
)


class _NoNats:
    def jetstream(self) -> None:
        return None


async def _fold(db_path: str, batches: list[list[tuple[int, object]]]) -> None:
    for batch in batches:
        runner = ProjectorRunner(_NoNats(), db_path)  # type: ignore[arg-type]
        await runner.load()   # what start() does before it subscribes
        for seq, event in batch:
            runner.fold(seq, event)  # type: ignore[arg-type]
            runner.folded_seq = seq
            runner._pending += 1
        await runner.flush()
        await runner.stop()


def _dump(db_path: str) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(db_path) as conn:
        return {table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall())
                for table in ("nodes", "instances", "evals", "jobs", "allocs", "alloc_versions",
                              "pools", "checkpoints")}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(EVENTS, min_size=1, max_size=40), cuts=st.lists(st.integers(1, 40)))
def test_batched_with_restarts_equals_one_rebuild(events: list[object], cuts: list[int]) -> None:
    history = list(enumerate(events, start=1))
    bounds = sorted({c for c in cuts if c < len(history)} | {len(history)})
    batches, start = [], 0
    for bound in bounds:
        batches.append(history[start:bound])
        start = bound
    with tempfile.TemporaryDirectory() as tmp:
        incremental = str(Path(tmp) / "incremental.db")
        rebuilt = str(Path(tmp) / "rebuilt.db")
        asyncio.run(_fold(incremental, batches))
        asyncio.run(_fold(rebuilt, [history]))
        assert _dump(incremental) == _dump(rebuilt)


async def test_a_failed_flush_keeps_its_rows_for_the_next_one(tmp_path: Path) -> None:
    from herdbook.projector import schema as schema_module

    runner = ProjectorRunner(_NoNats(), str(tmp_path / "view.db"))  # type: ignore[arg-type]
    await runner.load()
    runner.fold(1, NodeRegistered(node_id="a"))
    runner.folded_seq, runner._pending = 1, 1
    real = schema_module.write_batch

    async def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    schema_module.write_batch = broken  # type: ignore[assignment]
    try:
        try:
            await runner.flush()
        except OSError:
            pass
    finally:
        schema_module.write_batch = real
    assert runner.committed_seq == 0
    await runner.flush()     # the disk is back: the row is written, not lost
    await runner.stop()
    with sqlite3.connect(tmp_path / "view.db") as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM nodes")] == ["a"]


async def test_stop_while_a_flush_writes_loses_nothing_and_does_not_hang(tmp_path: Path) -> None:
    runner = ProjectorRunner(_NoNats(), str(tmp_path / "view.db"),  # type: ignore[arg-type]
                             batch_interval=0.001)
    await runner.load()
    runner._flusher = asyncio.create_task(runner._flush_loop())
    for seq in range(1, 2001):
        runner.fold(seq, NodeRegistered(node_id=f"n{seq}"))
        runner.folded_seq = seq
        runner._pending += 1
        if seq % 100 == 0:
            runner._kick.set()
            await asyncio.sleep(0)
    await asyncio.wait_for(runner.stop(), 10)
    with sqlite3.connect(tmp_path / "view.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 2000
        assert conn.execute("SELECT seq FROM checkpoints").fetchone()[0] == 2000
