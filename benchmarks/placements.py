"""Placements per second beside the raw append rate, in the same run.

Each round starts a fresh server and control plane (as `herd up` builds it; it leads, so
the scheduler runs), registers NODES schedulable nodes, and measures, alternating:
- placements: one job-register eval placing COUNT allocations through the real broker,
  scheduler and projector, from the eval's append to its completion;
- raw appends, one ack each: the same number of AllocPlaced events, shaped like the
  scheduler's (same subjects, Nats-Msg-Id and expected-version headers, GPUS per node,
  64 nodes side by side, each event expecting the previous): what a plan cost before
  atomic batches, and the limit the issue names;
- the same, 1024 nodes side by side (what more concurrency would buy);
- raw plan batches: the same events as the scheduler now sends a plan of ``ATOMIC_MIN``
  events or more: whole nodes in atomic batches of up to ``PLAN_BATCH`` events, each
  node's first event expecting its version, batches side by side (the limit of the path
  placements take; what is left between the two is the eval's own work).
Medians over the rounds, with the spread, and the ratio of each round's placements to its
own raw appends and raw plan batches (the machine's load moves both); everything created
is deleted. The control plane logs as `herd up` does (at ``--log-level``, into /dev/null).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

from benchmarks.common import report, spread, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.alloc import AllocPlaced
from herdbook.events.base import new_id
from herdbook.events.evals import EvalStatus
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.job_events import JobRegistered, JobSpec, Resources
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.reactors.placement import Placement, Slot
from herdbook.reactors.plan_apply import APPLY_CONCURRENCY, PLAN_BATCH, NodePlan, plan_batches
from herdbook.reactors.scheduler import new_eval

# Nodes that never heartbeat stay READY for the benchmark's length.
CONFIG = """
nats: {{url: '{url}'}}
data_dir: '{data}'
node_id: cp-bench
lifecycle: {{heartbeat_timeout: 1h}}
"""


async def gathered(jobs: list[Callable[[], Awaitable[object]]], width: int) -> None:
    gate = asyncio.Semaphore(width)

    async def one(job: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(j) for j in jobs))


async def add_nodes(store: EventStore, nodes: int, gpus: int) -> int:
    info = NodeInfo(cpus=0, gpus=tuple(GpuInfo(index=i, uuid=f"g{i}", name="H100")
                                       for i in range(gpus)))
    last = [0]

    async def node(node_id: str) -> None:
        for event in (NodeRegistered(node_id=node_id, boot_id="b", info=info),
                      NodeApproved(node_id=node_id),
                      NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
            last[0] = max(last[0], await store.append(event))

    await gathered([partial(node, f"node-{i:06d}") for i in range(nodes)], 64)
    return last[0]


def raw_events(prefix: str, nodes: int, count: int, gpus: int) -> list[list[AllocPlaced]]:
    """COUNT placements, GPUS per node as the bin-packer fills them, on fresh nodes."""
    out: list[list[AllocPlaced]] = []
    for i in range(min(nodes, -(-count // gpus))):
        node_id = f"{prefix}-{i:06d}"
        out.append([AllocPlaced(node_id=node_id, alloc_id=new_id()[:20], job_id="raw",
                                eval_id="raw", index=i * gpus + k, command=["true"],
                                resources=Resources(cpu=0.1, memory_mb=0, gpus=1),
                                actor="scheduler", causation_id="raw")
                    for k in range(min(gpus, count - i * gpus))])
    return out


async def raw_acked(store: EventStore, parts: list[list[AllocPlaced]],
                    width: int = APPLY_CONCURRENCY) -> float:
    """One acknowledged append per event (each expecting the previous), ``width`` nodes
    side by side."""
    start = time.monotonic()
    await gathered([partial(store.append_decided, p, 0) for p in parts], width)
    return sum(map(len, parts)) / (time.monotonic() - start)


async def raw_batched(store: EventStore, parts: list[list[AllocPlaced]]) -> float:
    """Whole nodes in atomic batches of up to ``PLAN_BATCH`` events, as a plan goes."""
    events = {p[0].node_id: p for p in parts}
    plans = [NodePlan(node_id, 0, [Placement(Slot(e.index), node_id) for e in part])
             for node_id, part in events.items()]
    batches = plan_batches(plans, PLAN_BATCH)
    start = time.monotonic()
    await asyncio.gather(*(store.append_atomic([(events[n.node_id], 0) for n in batch])
                           for batch in batches))
    return sum(map(len, parts)) / (time.monotonic() - start)


async def one_round(nodes: int, count: int, gpus: int) -> tuple[float, float, float, float, str]:
    server, tmp = start_server()
    try:
        plane = bootstrap(parse_config(CONFIG.format(url=server.url, data=tmp / "cp")),
                          clock=SYSTEM_CLOCK)
        await plane.start()
        try:
            store, projector = plane.store, plane.projector
            await projector.wait_applied(await add_nodes(store, nodes, gpus), timeout=300)
            acked = await raw_acked(store, raw_events("acked", nodes, count, gpus))
            wide = await raw_acked(store, raw_events("wide", nodes, count, gpus), 1024)
            await projector.catch_up()
            spec = JobSpec(id="bench", command=["true"], count=count,
                           resources=Resources(cpu=0.1, memory_mb=0, gpus=1))
            await projector.wait_applied(await store.append(JobRegistered(job_id="bench",
                                                                          spec=spec)))
            created = new_eval(Trigger.JOB_REGISTER, projector.jobs["bench"])
            start = time.monotonic()
            await store.append(created, expected_version=0)
            while (e := projector.evals.get(created.eval_id)) is None or e.status not in (
                    EvalStatus.COMPLETE, EvalStatus.FAILED):
                await asyncio.sleep(0.005)
            elapsed = time.monotonic() - start
            placed = sum(1 for a in projector.allocs.values() if a.job_id == "bench")
            batched = await raw_batched(store, raw_events(f"b{uuid.uuid4().hex[:6]}",
                                                          nodes, count, gpus))
            return (placed / elapsed, acked, wide, batched,
                    f"{placed} placed, eval {e.status.value}")
        finally:
            await plane.stop()
    finally:
        stop_server(server, tmp)


async def main(nodes: int, count: int, gpus: int, rounds: int, log_level: str) -> None:
    placed: list[float] = []
    acked: list[float] = []
    wide: list[float] = []
    batched: list[float] = []
    for r in range(rounds):
        p, a, w, b, what = await one_round(nodes, count, gpus)
        for values, value in ((placed, p), (acked, a), (wide, w), (batched, b)):
            values.append(value)
        print(f"round {r + 1}: placements {p:,.0f}/s ({what}); raw appends one ack each "
              f"{a:,.0f}/s, 1024 wide {w:,.0f}/s; raw plan batches {b:,.0f}/s")
    def ratios(limit: list[float]) -> str:
        each = [p / x for p, x in zip(placed, limit, strict=True)]
        return f"median {statistics.median(each):.2f}, {min(each):.2f}–{max(each):.2f}"

    mid = spread(placed)[0]
    # The limit is raw plan batches: the same events through the path placements take
    # (atomic batches). Raw appends with one ack each are what a plan cost before atomic
    # batches: placements now beat them, so they are a comparison, not a limit.
    report("placements",
           f"{spread(placed)[1]} placements/s; LIMIT, raw plan batches (up to {PLAN_BATCH} "
           f"events) {spread(batched)[1]}/s: ratio {mid / spread(batched)[0]:.2f} (per "
           f"round {ratios(batched)}); for comparison, raw appends (one ack each, 64 nodes side by "
           f"side) {spread(acked)[1]}/s: ratio {mid / spread(acked)[0]:.2f} (per round, "
           f"placements over raw appends of the same round: {ratios(acked)}); 1024 side by "
           f"side {spread(wide)[1]}/s: ratio {mid / spread(wide)[0]:.2f} (per round "
           f"{ratios(wide)}) ({count} allocations on {nodes} nodes of {gpus} GPUs, "
           f"{rounds} rounds)",
           ">= 0.7 of raw plan batches (the limit); >= 0.8 of one-ack raw appends",
           f"python -m benchmarks.placements --nodes {nodes} --count {count} --gpus {gpus} "
           f"--rounds {rounds} --log-level {log_level}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="schedulable nodes")
    parser.add_argument("--count", type=int, default=4000, help="allocations to place")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--log-level", default="info",
                        help="the control plane's log level, as `herd up --log-level` (the "
                             "log goes to /dev/null); none for no logging set up")
    args = parser.parse_args()
    if args.log_level != "none":
        logging.basicConfig(level=args.log_level.upper(), stream=open(os.devnull, "w"),
                            format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    if min(args.nodes, args.count, args.gpus, args.rounds) < 1:
        parser.error("--nodes, --count, --gpus and --rounds must be at least 1")
    asyncio.run(main(args.nodes, args.count, args.gpus, args.rounds, args.log_level))
