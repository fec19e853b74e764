"""The health classifier's CPU per report at fleet sizes, beside two figures of the same
run: the same reports only decoded (msgspec: the floor of any reader of HERD_HEALTH) and
the heartbeat intake's CPU per heartbeat (the liveness work that shards, issue 32). From
them, the fleet-wide CPU of each at the default intervals (a health report every 60 s,
``agent --health-interval``; a heartbeat every 10 s, a third of the 30 s heartbeat
timeout), and the decision whether the classifier shards with liveness or stays on the
leader.

In one process, on the real objects: the classifier's ``_on_report`` (the callback its
HERD_HEALTH feed calls: decode, bind to the subject, check the ids, the CEL policy, the
fault history and holds, the health decider through the one decide runner) and the
sweeper's heartbeat intake (``on_live``: decode, bind, judge, record, re-arm), each fed
real nats-py ``Msg`` objects carrying what the agent publishes: health reports made by
the agent's own ``HealthMonitor`` over a fake 8-GPU NVML (a share of them faulty: a hot
GPU, ECC and PCIe counters), heartbeats by ``NodeProtocol.heartbeat``. The event store
and view are the in-memory ones of the unit tests (``tests/fakes.py``), so neither the
NATS client's parsing nor an append's round trip is counted: for both paths alike. It
writes nothing to disk.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from itertools import count

import msgspec
from nats.aio.msg import Msg

from benchmarks.common import machine, report, sizes_arg
from herdbook.agent import fake_nvml
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.agent.protocol import MemorySequence, NodeProtocol
from herdbook.config import Config
from herdbook.events.codec import decode_health_report, encode
from herdbook.events.health_report import HealthReport
from herdbook.events.node import GpuInfo, NodeApproved, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.health.policy import Policy
from herdbook.reactors.classifier import HealthClassifier
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.sweeper import Sweeper
from tests.fakes import FakeClock, FakeNats, FakeProjector, FakeStore

HEALTH_INTERVAL = 60.0     # agent --health-interval's default
HEARTBEAT_INTERVAL = 10.0  # a third of lifecycle.heartbeat_timeout's default 30 s
SHARE_LIMIT = 0.25         # below it the classifier stays on the leader
CHUNK = 5_000              # messages built per chunk, outside the timed part
FAULTS = (("thermal", 1, 97.0), ("ecc_sbe", 2, 3.0), ("pcie", 3, 5.0))


def template_reports() -> tuple[HealthReport, list[HealthReport]]:
    """A healthy report and faulty ones, each made by the agent's HealthMonitor over a
    fake 8-GPU NVML, as ``agent.reports.send_health`` makes them."""
    clock = FakeClock()
    healthy = HealthMonitor(fake_nvml.FakeNvml(count=8, seed="h"), clock=clock).report(
        "n", "b", time.time())
    faulty = []
    for word, gpu, value in FAULTS:
        nvml = fake_nvml.FakeNvml(count=8, seed=word)
        monitor = HealthMonitor(nvml, clock=clock)
        nvml.inject(word, gpu, value)
        faulty.append(monitor.report("n", "b", time.time()))
    return healthy, faulty


class Fleet:
    """``nodes`` registered, approved and boot-checked nodes (8 GPUs each) in the test
    suite's in-memory store and view, with the classifier and the sweeper over the one
    decide runner, as ``control/bootstrap.py`` wires them."""

    def __init__(self, nodes: int) -> None:
        config = Config()
        self.clock = FakeClock()
        self.projector = FakeProjector()
        self.store = FakeStore(self.projector)
        runner = DecideRunner(self.store, self.projector, self.clock)  # type: ignore[arg-type]
        self.classifier = HealthClassifier(
            FakeNats(), self.projector, Policy.load(None),  # type: ignore[arg-type]
            config.health.unhealthy_threshold, clock=self.clock, runner=runner)
        self.sweeper = Sweeper(FakeNats(), self.store, self.projector,  # type: ignore[arg-type]
                               config, clock=self.clock, runner=runner)
        self.ids = [f"node-{i:06d}" for i in range(nodes)]
        for node_id in self.ids:
            info = NodeInfo(gpus=tuple(GpuInfo(index=g, uuid=f"{node_id}-{g}", name="H100")
                                       for g in range(8)))
            for event in (NodeRegistered(node_id=node_id, boot_id="b", info=info),
                          NodeApproved(node_id=node_id),
                          NodeBootChecked(node_id=node_id, boot_id="b", passed=True)):
                self.store.fold(event)
        self.classifier.follow({})
        self.projector.nodes.subscribe(self.sweeper._on_view_change)
        self.sweeper.begin_observing()
        self.protocols = {n: NodeProtocol(n, actor=f"agent:{n}", seqs=MemorySequence(),
                                          boot_id="b") for n in self.ids}
        self.seq = count(1)


def health_msgs(fleet: Fleet, healthy: HealthReport, faulty: list[HealthReport],
                round_: int, every: int) -> Iterator[list[Msg]]:
    """One health interval's reports of every node, in chunks: every ``every``-th node
    (a different set each round) sends a faulty one."""
    at_ns = int(fleet.clock.now().timestamp() * 1e9)
    for start in range(0, len(fleet.ids), CHUNK):
        chunk = []
        for i in range(start, min(start + CHUNK, len(fleet.ids))):
            node_id = fleet.ids[i]
            bad = every > 0 and (i + round_) % every == 0
            base = faulty[(i // every + round_) % len(faulty)] if bad else healthy
            body = msgspec.structs.replace(base, report_id=f"{node_id}-{round_}",
                                           node_id=node_id, sent_at=at_ns / 1e9)
            seq = next(fleet.seq)
            chunk.append(Msg(_client=None,  # type: ignore[arg-type]
                             subject=f"herd.health.{node_id}", data=encode(body),
                             reply=f"$JS.ACK.HERD_HEALTH.c.1.{seq}.{seq}.{at_ns}.0"))
        yield chunk


def heartbeat_msgs(fleet: Fleet) -> Iterator[list[Msg]]:
    """One heartbeat interval's heartbeats of every node, in chunks, as the agent sends
    them (``agent.protocol``)."""
    for start in range(0, len(fleet.ids), CHUNK):
        yield [Msg(_client=None,  # type: ignore[arg-type]
                   subject=f"herd.hb.{node_id}",
                   data=encode(fleet.protocols[node_id].heartbeat(
                       gpu_count=8, max_temp_c=45.0, running_allocs=1,
                       interval=HEARTBEAT_INTERVAL)))
               for node_id in fleet.ids[start:start + CHUNK]]


async def cpu_of(chunks: Iterator[list[Msg]], handle: Callable[[Msg], Awaitable[None]]
                 ) -> tuple[float, int]:
    """CPU seconds ``handle`` took over every message, and how many: the building of the
    messages is not counted."""
    spent, done = 0.0, 0
    for chunk in chunks:
        begin = time.process_time()
        for msg in chunk:
            await handle(msg)
        spent += time.process_time() - begin
        done += len(chunk)
    return spent, done


def decode_cpu(chunks: Iterator[list[Msg]]) -> tuple[float, int]:
    """The limit: the same reports only decoded."""
    spent, done = 0.0, 0
    for chunk in chunks:
        begin = time.process_time()
        for msg in chunk:
            decode_health_report(msg.data)
        spent += time.process_time() - begin
        done += len(chunk)
    return spent, done


async def measure(nodes: int, rounds: int, every: int) -> tuple[float, float, float, int]:
    """(classifier, decode-only, heartbeat intake) µs CPU per message at ``nodes``, and
    the health changes the classifier appended in the measured rounds."""
    healthy, faulty = template_reports()
    fleet = Fleet(nodes)
    hb_on = fleet.sweeper.intake.on_live
    # one warm round of each: every node's first report turns it HEALTHY (an append)
    await cpu_of(health_msgs(fleet, healthy, faulty, 0, every), fleet.classifier._on_report)
    await cpu_of(heartbeat_msgs(fleet), hb_on)
    appended_before = len(fleet.store.appended)
    classify = decode = beat = 0.0
    reports = beats = 0
    for r in range(1, rounds + 1):
        fleet.clock.advance(HEALTH_INTERVAL)
        gc.collect()
        spent, done = await cpu_of(health_msgs(fleet, healthy, faulty, r, every),
                                   fleet.classifier._on_report)
        classify, reports = classify + spent, reports + done
        spent, _ = decode_cpu(health_msgs(fleet, healthy, faulty, r, every))
        decode += spent
        gc.collect()
        spent, done = await cpu_of(heartbeat_msgs(fleet), hb_on)
        beat, beats = beat + spent, beats + done
    assert fleet.classifier.reports == nodes * (rounds + 1), "reports not classified"
    assert fleet.sweeper.intake.accepted == nodes * (rounds + 1), "heartbeats not accepted"
    return (classify / reports * 1e6, decode / reports * 1e6, beat / beats * 1e6,
            len(fleet.store.appended) - appended_before)


async def main(sizes: list[int], rounds: int, faulty_share: float) -> None:
    every = round(1 / faulty_share) if faulty_share > 0 else 0
    print(f"health reports every {HEALTH_INTERVAL:g}s, heartbeats every "
          f"{HEARTBEAT_INTERVAL:g}s (the defaults); 1 in {every or 'no'} reports faulty; "
          f"{rounds} measured round(s) after a warm one; {machine()}", flush=True)
    results = {}
    for nodes in sizes:
        c, d, h, changes = await measure(nodes, rounds, every)
        results[nodes] = (c, d, h)
        print(f"{nodes:,} nodes: classifier {c:.1f} µs CPU per health report; limit, the same "
              f"reports only decoded (msgspec) {d:.1f} µs: ratio {d / c:.2f}; heartbeat "
              f"intake {h:.1f} µs CPU per heartbeat; {changes} health changes appended",
              flush=True)
    largest = max(sizes)
    c, d, h = results[largest]
    health_s = largest / HEALTH_INTERVAL * c / 1e6
    beat_s = largest / HEARTBEAT_INTERVAL * h / 1e6
    share = health_s / beat_s
    print(f"fleet at {largest:,} nodes: classifier {largest / HEALTH_INTERVAL:,.0f} reports/s "
          f"x {c:.1f} µs = {health_s:.3f} CPU s/s; heartbeat intake "
          f"{largest / HEARTBEAT_INTERVAL:,.0f}/s x {h:.1f} µs = {beat_s:.3f} CPU s/s; "
          f"classifier share {share:.2f} of the heartbeat intake's (limit {SHARE_LIMIT})")
    if share < SHARE_LIMIT:
        print(f"decision: the classifier stays on the leader ({share:.2f} < {SHARE_LIMIT} "
              f"of the liveness work that shards)")
    else:
        print(f"decision: the classifier shards by node with liveness ({share:.2f} >= "
              f"{SHARE_LIMIT} of the liveness work that shards): with lifecycle."
              f"liveness_shards S > 1 each replica classifies the nodes of the shards it "
              f"holds (reactors/classifier.py take/release, docs/scale.md)")
    report("health classifier CPU per report", f"{c:.1f} µs at {largest:,} nodes against "
           f"{d:.1f} µs decode-only (limit; ratio {d / c:.2f}) and {h:.1f} µs per heartbeat",
           f"its fleet-wide CPU < {SHARE_LIMIT} of the heartbeat intake's to stay on the "
           f"leader", f"python -m benchmarks.classifier_cost --sizes "
           f"{','.join(map(str, sizes))} --rounds {rounds} --faulty {faulty_share:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=sizes_arg, default=[1000, 100_000],
                        help="fleet sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=1, help="measured rounds per size")
    parser.add_argument("--faulty", type=float, default=0.01,
                        help="share of the reports that are faulty")
    args = parser.parse_args()
    if args.rounds < 1 or not 0 <= args.faulty <= 0.5:
        parser.error("--rounds >= 1 and 0 <= --faulty <= 0.5")
    asyncio.run(main(args.sizes, args.rounds, args.faulty))
