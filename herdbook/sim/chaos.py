"""Chaos mode: random failures at ``rate`` per 1000 nodes per minute (a Poisson process,
seeded), then how many the view showed and how fast.

A failure hits a node that has not failed yet in this run, and stays: an XID 79 or
ECC double-bit error (fatal: DOWN + UNHEALTHY at once), a partition (heartbeats
stop, the agent stays) or a stop (the agent is gone). Detection latency is the time
from the injection to the first DEGRADED/DOWN/UNHEALTHY event folded into the view;
for partition and stop it includes ``heartbeat_timeout`` by design.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from herdbook.durations import Duration
from herdbook.events.faults import Fault
from herdbook.sim.detections import latency_summary
from herdbook.sim.node_control import SimError
from herdbook.sim.scenario import FleetGroup
from herdbook.sim.world import CONTROL_NODE_ID, World
from herdbook.sim.world_run import run_world

ChaosKind = Literal["xid", "ecc_dbe", "partition", "stop"]
"""What ``herd sim chaos`` injects: two GPU faults (``events.faults.Fault``) and two
liveness failures. ``ecc-dbe``, the spelling before issue 30, is still read (``--mix``)."""
CHAOS_KINDS: tuple[ChaosKind, ...] = get_args(ChaosKind)
LIVENESS_KINDS = frozenset({"partition", "stop"})
EXIT_OK, EXIT_FAILED = 0, 1


def parse_mix(text: str) -> dict[str, float]:
    """``xid=0.5,partition=0.3,stop=0.2`` -> weights (need not sum to 1)."""
    mix: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        kind, sep, weight = part.partition("=")
        kind = kind.strip().replace("-", "_")
        if kind not in CHAOS_KINDS:
            raise ValueError(f"--mix: {kind!r} is not one of {', '.join(CHAOS_KINDS)}")
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"--mix: {part!r}: the weight is not a number") from None
        if value < 0:
            raise ValueError(f"--mix: {part!r}: a weight is not negative")
        mix[kind] = value
    if not mix or sum(mix.values()) <= 0:
        raise ValueError("--mix: give at least one failure kind with a positive weight, "
                         "e.g. xid=0.5,partition=0.3,stop=0.2")
    return mix


@dataclass(frozen=True)
class Planned:
    at_s: float
    kind: str
    node: str


def plan_failures(rng: random.Random, nodes: list[str], rate: float, duration: float,
                  mix: dict[str, float]) -> list[Planned]:
    """Poisson arrivals at ``rate`` per 1000 nodes per minute over ``duration`` seconds;
    each on a node not hit before (none left: the plan ends). Pure given ``rng``."""
    per_second = rate * len(nodes) / 1000.0 / 60.0
    if per_second <= 0 or not nodes:
        return []
    kinds = sorted(mix)
    weights = [mix[k] for k in kinds]
    healthy = sorted(nodes)
    out: list[Planned] = []
    t = rng.expovariate(per_second)
    while t < duration and healthy:
        node = healthy.pop(rng.randrange(len(healthy)))
        out.append(Planned(round(t, 4), rng.choices(kinds, weights)[0], node))
        t += rng.expovariate(per_second)
    return out


@dataclass
class ChaosOptions:
    nodes: int = 100
    rate: float = 60.0
    duration: float = 30.0
    mix: dict[str, float] = field(default_factory=lambda: {"xid": 0.5, "partition": 0.3,
                                                           "stop": 0.2})
    seed: int | None = None
    lightweight: bool = False
    heartbeat_interval: float = 0.5
    heartbeat_timeout: float = 2.0
    grace_period: float = 2.0
    gpus: int = 8


@dataclass
class ChaosResult:
    seed: int
    options: dict[str, Any]
    exit_code: int = EXIT_OK
    failure: str | None = None
    startup_s: float = 0.0
    ready_s: float = 0.0
    duration_s: float = 0.0
    injected: dict[str, int] = field(default_factory=dict)
    detected: int = 0
    missed: list[dict[str, Any]] = field(default_factory=list)
    false_alarms: list[dict[str, Any]] = field(default_factory=list)
    control_plane_alarms: list[dict[str, Any]] = field(default_factory=list)
    """Failure events of the control plane's own (requester) node: it heartbeats from
    the event loop the whole simulation shares, so a late loop can make it look silent.
    Reported, not counted as false alarms."""
    latency: dict[str, Any] = field(default_factory=dict)
    latency_by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    injections: list[dict[str, Any]] = field(default_factory=list)
    detections: list[dict[str, Any]] = field(default_factory=list)
    control_plane: dict[str, Any] = field(default_factory=dict)
    loop_lag: dict[str, Any] = field(default_factory=dict)
    """How late the shared event loop woke up (seconds): a large lag means the
    simulation, not the control plane, was the bottleneck."""

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def report(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok, "mode": "chaos"}


def chaos_config(options: ChaosOptions) -> dict[str, Any]:
    return {"approval": {"auto_approve": True},
            "lifecycle": {"heartbeat_timeout": options.heartbeat_timeout,
                          "grace_period": {"standard": options.grace_period}}}


async def run_chaos(options: ChaosOptions, *, data_dir: str | Path | None = None,
                    on_event: Callable[[str], None] | None = None) -> ChaosResult:
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    say = on_event or (lambda text: None)
    result = ChaosResult(seed=seed, options={**asdict(options), "seed": seed})
    group = FleetGroup(count=options.nodes, prefix="node", gpus=options.gpus,
                       heartbeat_interval=Duration(options.heartbeat_interval),
                       health_interval=Duration(max(options.duration, 60.0)),
                       lightweight=options.lightweight)
    async def body(world: World) -> bool:
        started = time.monotonic()
        ready_timeout = 30.0 + options.nodes / 20.0
        if not await _until(lambda: _ready(world) == len(world.fleet_ids), ready_timeout):
            result.exit_code = EXIT_FAILED
            result.failure = (f"only {_ready(world)}/{len(world.fleet_ids)} nodes READY "
                              f"after {ready_timeout:g}s")
            return False
        result.ready_s = round(time.monotonic() - started, 3)
        say(f"{len(world.fleet_ids)} nodes READY in {result.ready_s:.1f}s; injecting for "
            f"{options.duration:g}s")
        plan = plan_failures(random.Random(seed), world.fleet_ids, options.rate,
                             options.duration, options.mix)
        await _inject(world, plan, say)
        remaining = options.duration - (time.monotonic() - world.detections.started)
        await asyncio.sleep(max(0.0, remaining))
        # Liveness failures need heartbeat_timeout (and a sweep) before they show.
        settle = options.heartbeat_timeout + 3.0
        await _until(lambda: not world.detections.pending(), settle)
        _summarize(world, result)
        return True

    return await run_world(result, chaos_config(options), [group], data_dir, body)


def _ready(world: World) -> int:
    """Fleet nodes READY with their health classified: the steady state to inject into
    (a starting fleet's first health reports queue at the classifier)."""
    nodes = world.nodes()
    return sum(1 for n in world.fleet_ids if n in nodes and nodes[n]["state"] == "READY"
               and nodes[n]["health"] != "UNKNOWN")


async def _until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _inject(world: World, plan: list[Planned], say: Callable[[str], None]) -> None:
    assert world.fleet is not None
    tracker = world.detections
    tracker.started = time.monotonic()
    for planned in plan:
        await asyncio.sleep(max(0.0, planned.at_s - tracker.now()))
        node = world.fleet.get(planned.node)
        try:
            match planned.kind:
                case "xid":
                    tracker.injected(planned.node, "xid")
                    await node.inject(Fault.XID, 0, 79)
                case "ecc_dbe":
                    tracker.injected(planned.node, "ecc_dbe")
                    await node.inject(Fault.ECC_DBE, 0, 1)
                case "partition":
                    node.partition(True)
                    tracker.injected(planned.node, "partition")
                case "stop":
                    await node.stop()
                    tracker.injected(planned.node, "stop")
        except (SimError, TimeoutError) as err:
            say(f"could not inject {planned.kind} into {planned.node}: {err}")
            continue
        say(f"{tracker.now():7.2f}s  {planned.kind:<9} {planned.node}")


def _summarize(world: World, result: ChaosResult) -> None:
    tracker = world.detections
    result.injected = dict(Counter(i.kind for i in tracker.injections))
    found = [i for i in tracker.injections if i.detected is not None]
    result.detected = len(found)
    result.missed = [{"node": i.node, "kind": i.kind, "at_s": round(i.at_s, 3)}
                     for i in tracker.pending()]
    result.false_alarms = [asdict(d) for d in tracker.unprompted() if d.node != CONTROL_NODE_ID]
    result.control_plane_alarms = [asdict(d) for d in tracker.unprompted()
                                   if d.node == CONTROL_NODE_ID]
    latencies = [i.detected.latency_s for i in found
                 if i.detected is not None and i.detected.latency_s is not None]
    result.latency = latency_summary(latencies)
    for kind in sorted(result.injected):
        values = [i.detected.latency_s for i in found if i.kind == kind
                  and i.detected is not None and i.detected.latency_s is not None]
        result.latency_by_kind[kind] = latency_summary(values)
    result.injections = [{"node": i.node, "kind": i.kind, "at_s": round(i.at_s, 4),
                          "detected_by": None if i.detected is None else i.detected.event,
                          "latency_s": None if i.detected is None else i.detected.latency_s}
                         for i in tracker.injections]
    result.detections = [asdict(d) for d in tracker.detections]
    if result.missed or result.false_alarms:
        result.exit_code = EXIT_FAILED
        result.failure = (f"{len(result.missed)} injected failure(s) not detected, "
                          f"{len(result.false_alarms)} false alarm(s)")
