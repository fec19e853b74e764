"""What per-GPU telemetry weighs on the wire, beside the heartbeat and the event log
(docs/gpus.md "Where telemetry flows"): one sample of an N-GPU node as the agent
publishes it (the fake backend: every field present, the largest sample NVML gives),
the heartbeat of the same agent, and what telemetry would be of HERD_EVENTS' bytes had it
been appended there, at the default interval. Message bodies only (a JetStream message
adds its subject and ~100 bytes of its own on top of each).

    python3 -m benchmarks.telemetry_size [--gpus 8] [--interval 15] [--events-per-day 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid

from herdbook.agent.fake_nvml import FakeNvml
from herdbook.agent.main import Agent, AgentOptions
from herdbook.agent.telemetry_sampler import sample
from herdbook.events.alloc import AllocCompleted, AllocPlaced, AllocRunning
from herdbook.events.codec import encode
from herdbook.events.health_report import NodeHealthChanged
from herdbook.events.node import NodeApproved, NodeBootChecked, NodeRegistered
from herdbook.events.states import Health


def node_events(agent: Agent) -> list[bytes]:
    """The events an 8-GPU node's day is made of: its registration (with its GPUs),
    boot check and approval, a health change, and allocations placed, running, done."""
    node = agent.node_id
    info = agent.collect_info()
    alloc = uuid.uuid4().hex
    events = [
        NodeRegistered(node_id=node, boot_id=agent.boot_id, info=info),
        NodeBootChecked(node_id=node, boot_id=agent.boot_id, passed=True,
                        checks={"nvml": "ok", "gpu_count": "ok", "state_dir": "ok"}),
        NodeApproved(node_id=node, actor="op-alice", reason="checked"),
        NodeHealthChanged(node_id=node, health=Health.DEGRADED, reason="thermal: GPU 3 at 92°C"),
        AllocPlaced(node_id=node, alloc_id=alloc, job_id="train-llm", eval_id=uuid.uuid4().hex,
                    index=0, command=["python", "train.py", "--epochs", "3"]),
        AllocRunning(node_id=node, alloc_id=alloc, pid=4242),
        AllocCompleted(node_id=node, alloc_id=alloc, exit_code=0),
    ]
    return [encode(e) for e in events]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0, help="seconds per sample")
    parser.add_argument("--events-per-day", type=int, default=1000,
                        help="events a busy node appends per day (scale.md: ~10 per life)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state_dir:
        agent = Agent(AgentOptions(node_id="gpu-0001", state_dir=state_dir,
                                   fake_gpus=args.gpus))
        telemetry = len(encode(sample(FakeNvml(args.gpus, seed="gpu-0001"), "gpu-0001",
                                      agent.boot_id, 1_700_000_000.0, "gpu-0001")))
        heartbeat = len(encode(agent.make_heartbeat()))
        event = statistics.mean(len(e) for e in node_events(agent))
    per_minute = telemetry * 60 / args.interval
    per_day = telemetry * 86400 / args.interval
    events_per_day = event * args.events_per_day
    print(f"telemetry sample, {args.gpus} GPUs: {telemetry} bytes "
          f"({telemetry / args.gpus:.0f} per GPU)")
    print(f"heartbeat of the same agent:      {heartbeat} bytes (unchanged by telemetry)")
    print(f"per node at {args.interval:g}s: {per_minute / 1000:.1f} KB/min, "
          f"{per_day / 1e6:.1f} MB/day; 10,000 nodes: {per_minute * 10_000 / 60 / 1e6:.2f} MB/s, "
          f"{per_day * 10_000 / 1e9:.0f} GB/day")
    print(f"an event of the node's day: {event:.0f} bytes on average; "
          f"{args.events_per_day} events/day = {events_per_day / 1e6:.2f} MB/day")
    print(f"telemetry in HERD_EVENTS would be {100 * per_day / (per_day + events_per_day):.2f}% "
          f"of its bytes ({per_day / events_per_day:.0f}x the events)")


if __name__ == "__main__":
    main()
