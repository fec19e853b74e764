"""Placements per second: one job-register eval placing COUNT allocations on NODES
schedulable nodes through the real broker, scheduler and projector."""

from __future__ import annotations

import argparse
import asyncio
import time

from benchmarks.common import report, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.evals import EvalStatus
from herdbook.events.evals import EvalTrigger as Trigger
from herdbook.events.jobs import JobRegistered, JobSpec, Resources
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.reactors.scheduler import new_eval

# Nodes that never heartbeat stay READY for the benchmark's length.
CONFIG = """
nats: {{url: '{url}'}}
data_dir: '{data}'
node_id: cp-bench
lifecycle: {{heartbeat_timeout: 1h}}
"""


async def main(nodes: int, count: int, gpus: int) -> None:
    server, tmp = start_server()
    try:
        # The whole control plane, as herd up builds it (it leads: the scheduler runs).
        plane = bootstrap(parse_config(CONFIG.format(url=server.url, data=tmp / "cp")),
                          clock=SYSTEM_CLOCK)
        await plane.start()
        store, projector = plane.store, plane.projector
        info = NodeInfo(cpus=0, gpus=tuple(GpuInfo(index=i, uuid=f"g{i}", name="H100")
                                           for i in range(gpus)))
        last = 0
        for i in range(nodes):
            node_id = f"node-{i:05d}"
            for event in (NodeRegistered(node_id=node_id, boot_id="b", info=info),
                          NodeApproved(node_id=node_id),
                          NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
                last = await store.append(event)
        await projector.wait_applied(last, timeout=120)
        spec = JobSpec(id="bench", command=["true"], count=count,
                       resources=Resources(cpu=0.1, memory_mb=0, gpus=1))
        await projector.wait_applied(await store.append(JobRegistered(job_id="bench",
                                                                      spec=spec)))
        created = new_eval(Trigger.JOB_REGISTER, projector.jobs["bench"])
        start = time.monotonic()
        await store.append(created, expected_version=0)
        while (e := projector.evals.get(created.eval_id)) is None or e.status not in (
                EvalStatus.COMPLETE, EvalStatus.FAILED):
            await asyncio.sleep(0.01)
        elapsed = time.monotonic() - start
        placed = sum(1 for a in projector.allocs.values() if a.job_id == "bench")
        await plane.stop()
        report("placements", f"{placed / elapsed:,.0f} placements/s ({placed} allocations on "
               f"{nodes} nodes, eval {e.status.value} in {elapsed:.2f}s)", ">= 4,000 allocations/s",
               f"python -m benchmarks.placements --nodes {nodes} --count {count} --gpus {gpus}")
    finally:
        stop_server(server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.count, args.gpus))
