"""``herd sim --replicas N``: liveness shards shown with real replicas (DESIGN §10,
docs/scale.md).

A nats-server that maps the heartbeats onto ``shards`` shards; N `herd up` processes on
it (``lifecycle.liveness_shards``), each with its own data dir, node id and /metrics;
lightweight nodes registered straight into HERD_EVENTS and heartbeated from this process
(core publishes, as agents send them). Once the replicas have shared the shards, each
one's heartbeat rate and CPU are measured over a window (from its /metrics and /proc).
With ``kill``, the last replica is then killed with SIGKILL and, at the same instant,
``doomed`` nodes stop heartbeating, half in its shards and half in the others': another
replica must take its shards over after its lease expires, watch them one heartbeat
timeout, and declare exactly the doomed nodes, no other.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats

from herdbook.api.messages import Envelope
from herdbook.control.nats_parts import ensure_streams
from herdbook.control.shards import shard_key
from herdbook.events.codec import encode
from herdbook.events.hb_shards import shard_of
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import subject_of
from herdbook.events.subjects import API_PREFIX
from herdbook.natsd.embedded import EmbeddedNats

BOOT = "sim-boot"
SWEEP_INTERVAL = 0.2


@dataclass(frozen=True)
class ReplicaOptions:
    nodes: int
    replicas: int = 2
    shards: int = 2
    heartbeat_timeout: float = 10.0
    lease_ttl: float = 6.0
    measure: float = 10.0
    kill: bool = True
    doomed: int = 10


@dataclass
class ReplicaFigures:
    name: str
    shards: list[int]
    heartbeats_per_s: float
    cpu_per_s: float
    """CPU seconds per second of the replica's process (its every thread)."""
    us_per_heartbeat: float
    retaken: int = 0
    """Shards this replica took during the window: a lease that lapsed and was retaken
    (its stored heartbeats are read again then, which inflates the rate)."""


@dataclass
class KillFigures:
    killed: str
    shards_taken_over: list[int]
    takeover_s: float
    """From the kill to the survivor holding every shard of the killed replica."""
    doomed: int
    declared: int
    latest_declared_s: float
    """From the kill to the last doomed node declared DEGRADED."""
    bound_s: float
    """Lease TTL + a lease tick + the watch (one heartbeat timeout) + the sweep tick."""
    false_alarms: list[str] = field(default_factory=list)
    """Nodes declared DEGRADED or DOWN that were heartbeating throughout."""

    @property
    def ok(self) -> bool:
        return (self.declared == self.doomed and not self.false_alarms
                and self.latest_declared_s <= self.bound_s)


@dataclass
class ReplicaReport:
    options: ReplicaOptions
    replicas: list[ReplicaFigures]
    kill: KillFigures | None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.kill is not None:
            out["kill"]["ok"] = self.kill.ok
        return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, every thread (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def statuses(nc: Any, names: list[str], tries: int = 60
                   ) -> dict[str, tuple[dict[str, Any], float]]:
    """Each replica's `herd status` (the API answers from any replica: asked until each
    one has), with when it answered. Not /metrics: rendering every node's series there
    takes seconds of the replica's event loop at 100k nodes, long enough to cost it its
    leases."""
    got: dict[str, tuple[dict[str, Any], float]] = {}
    for _ in range(tries):
        if len(got) == len(names):
            break
        asked = time.monotonic()
        try:
            msg = await nc.request(f"{API_PREFIX}.status", b"{}", timeout=30)
        except Exception:  # noqa: BLE001 - none up yet, or a slow one: ask again
            await asyncio.sleep(0.5)
            continue
        body = msgspec.json.decode(msg.data, type=Envelope)
        if body.ok:
            result = msgspec.json.decode(body.result)
            got.setdefault(result["instance"], (result, (asked + time.monotonic()) / 2))
    return got


class Replica:
    def __init__(self, index: int, work: Path, url: str, config: Path) -> None:
        self.name = f"replica-{index}"
        data = work / self.name
        data.mkdir(parents=True, exist_ok=True)
        self.log = open(data / "herd-up.log", "ab")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "herdbook.cli", "up", "-c", str(config), "--nats-url", url,
             "--data-dir", str(data), "--node-id", self.name, "--http-port", "0",
             "--log-level", "info"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class ReplicaFleet:
    """Lightweight nodes: registered as agents would (two events each, core-published into
    HERD_EVENTS), then heartbeated every a third of the timeout, spread over it."""

    def __init__(self, nc: Any, nodes: int, interval: float) -> None:
        self.nc = nc
        self.ids = [f"sim-{i}" for i in range(nodes)]
        self.interval = interval
        self.silent: set[str] = set()
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        for i, node_id in enumerate(self.ids):
            for event in (NodeRegistered(node_id=node_id, boot_id=BOOT),
                          NodeBootChecked(node_id=node_id, boot_id=BOOT, passed=True)):
                await self.nc.publish(subject_of(event), encode(event))
            if i % 5000 == 0:
                await self.nc.flush()
        await self.nc.flush()

    def start(self) -> None:
        self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        seq, chunk = 0, max(1, len(self.ids) // max(1, int(self.interval / 0.05)))
        while True:
            seq += 1
            started = time.monotonic()
            for i in range(0, len(self.ids), chunk):
                for node_id in self.ids[i:i + chunk]:
                    if node_id not in self.silent:
                        await self.nc.publish(f"herd.hb.{node_id}", encode(Heartbeat(
                            node_id=node_id, boot_id=BOOT, seq=seq, interval=self.interval)))
                        self.sent += 1
                target = started + self.interval * (i + chunk) / len(self.ids)
                await asyncio.sleep(max(0.0, target - time.monotonic()))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def holders(kv: Any, shards: int) -> dict[int, str]:
    out: dict[int, str] = {}
    for shard in range(shards):
        try:
            entry = await kv.get(shard_key(shard))
        except Exception:  # noqa: BLE001 - not held now
            continue
        out[shard] = (entry.value or b"").decode()
    return out


async def until(predicate: Callable[[], Any], timeout: float, what: str,
                interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(interval)
    raise TimeoutError(f"{what} not within {timeout:g}s")


def config_yaml(opts: ReplicaOptions) -> str:
    t = opts.heartbeat_timeout
    return (f"lifecycle: {{heartbeat_timeout: {t}, heartbeat_timeout_sensitive: {t}, "
            f"liveness_shards: {opts.shards}, grace_period: {{standard: {3 * t}}}, "
            f"sweep_interval: {SWEEP_INTERVAL}}}\nleader_ttl: {opts.lease_ttl}\n"
            "view: {snapshots: false}\nhttp: {port: 0}\n")


async def run_replicas(opts: ReplicaOptions, work: Path,
                       say: Callable[[str], None] = print) -> ReplicaReport:
    server = EmbeddedNats(work / "nats", port=free_port(), liveness_shards=opts.shards)
    await server.start_async()
    replicas: list[Replica] = []
    nc = await nats.connect(server.url)
    fleet = ReplicaFleet(nc, opts.nodes, opts.heartbeat_timeout / 3)
    try:
        await ensure_streams(nc, 1, 3600.0)
        say(f"registering {opts.nodes:,} lightweight nodes")
        await fleet.register()
        fleet.start()     # heartbeating before any replica watches: none may look silent
        config = work / "herd.yaml"
        config.write_text(config_yaml(opts))
        # One after the other: each folds the whole log at its start, and two doing so
        # at once on a small machine can starve each other past NATS's write deadline.
        for i in range(opts.replicas):
            replicas.append(Replica(i + 1, work, server.url, config))
            await until(lambda: _all_up(nc, replicas, opts.nodes), 900,
                        f"replica-{i + 1}'s view", interval=2.0)
        kv = await nc.jetstream().key_value("herd_leases")
        share = -(-opts.shards // opts.replicas)

        async def balanced() -> bool:
            held = await holders(kv, opts.shards)
            counts = [sum(1 for h in held.values() if h == r.name) for r in replicas]
            return len(held) == opts.shards and all(0 < c <= share for c in counts)
        await until(balanced, 60 + 4 * opts.lease_ttl, "the replicas sharing the shards")
        say(f"{opts.replicas} replicas share {opts.shards} shards; watching one heartbeat "
            f"timeout ({opts.heartbeat_timeout:g}s), then measuring {opts.measure:g}s")
        await asyncio.sleep(opts.heartbeat_timeout)
        figures = await measure(nc, replicas, kv, opts)
        for f in figures:
            say(f"  {f.name}: shards {f.shards}, {f.heartbeats_per_s:,.0f} heartbeats/s, "
                f"{f.cpu_per_s:.2f} CPU s/s ({f.us_per_heartbeat:.1f} µs a heartbeat)"
                + (f"; {f.retaken} shards lost and retaken meanwhile" if f.retaken else ""))
        kill = None
        if opts.kill and opts.replicas >= 2:
            kill = await kill_one(nc, kv, fleet, replicas, opts, say)
        return ReplicaReport(opts, figures, kill)
    finally:
        await fleet.stop()
        for replica in replicas:
            await asyncio.to_thread(replica.stop)
        await nc.close()
        await asyncio.to_thread(server.stop)


async def _all_up(nc: Any, replicas: list[Replica], nodes: int) -> bool:
    for replica in replicas:
        if not replica.alive():
            raise RuntimeError(f"{replica.name} exited (its log: {replica.log.name})")
    got = await statuses(nc, [r.name for r in replicas], tries=3 * len(replicas))
    return len(got) == len(replicas) and all(
        status["nodes"] >= nodes for status, _ in got.values())


async def measure(nc: Any, replicas: list[Replica], kv: Any, opts: ReplicaOptions
                  ) -> list[ReplicaFigures]:
    """Accepted heartbeats from each replica's status, read before and after the window
    (each stamped when it answered); CPU from /proc over the window alone."""
    names = [r.name for r in replicas]

    async def accepted() -> list[tuple[float, float, int]]:
        got = await statuses(nc, names)
        missing = [n for n in names if n not in got]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} did not answer status")
        return [(float(got[n][0]["heartbeats_accepted"]), got[n][1],
                 int(got[n][0].get("liveness_shards_taken", 0))) for n in names]

    def cpu() -> list[float]:
        return [cpu_seconds(r.proc.pid) for r in replicas]
    before = await accepted()
    cpu0, t0 = cpu(), time.monotonic()
    await asyncio.sleep(opts.measure)
    cpu1, t1 = cpu(), time.monotonic()
    after = await accepted()
    held = await holders(kv, opts.shards)
    out = []
    for i, replica in enumerate(replicas):
        (n0, s0, k0), (n1, s1, k1) = before[i], after[i]
        rate, used = (n1 - n0) / (s1 - s0), (cpu1[i] - cpu0[i]) / (t1 - t0)
        out.append(ReplicaFigures(
            replica.name, sorted(k for k, h in held.items() if h == replica.name),
            rate, used, 1e6 * used / max(rate, 1e-9), k1 - k0))
    return out


async def kill_one(nc: Any, kv: Any, fleet: ReplicaFleet, replicas: list[Replica],
                   opts: ReplicaOptions, say: Callable[[str], None]) -> KillFigures:
    victim, survivors = replicas[-1], replicas[:-1]
    held = await holders(kv, opts.shards)
    theirs = sorted(k for k, h in held.items() if h == victim.name)
    doomed = ([n for n in fleet.ids if shard_of(n, opts.shards) in theirs][:opts.doomed // 2]
              + [n for n in fleet.ids if shard_of(n, opts.shards) not in theirs]
              [:opts.doomed - opts.doomed // 2])
    declared: dict[str, float] = {}
    alarms: list[str] = []

    async def on_event(msg: Any) -> None:
        node_id = msg.subject.split(".")[2]
        if node_id == victim.name:
            return          # the killed replica's own node: rightly declared, not a sim node
        if node_id in fleet.silent:
            declared.setdefault(node_id, time.monotonic())
        else:
            alarms.append(f"{node_id} {msg.subject.rsplit('.', 1)[-1]}")
    subs = [await nc.subscribe(f"herd.node.*.{name}", cb=on_event)
            for name in ("degraded", "down")]
    await nc.flush()
    victim.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    fleet.silent.update(doomed)
    say(f"killed {victim.name} (SIGKILL) holding shards {theirs}; {len(doomed)} nodes stop "
        f"heartbeating now, {opts.doomed // 2} of them in its shards")
    taken = None
    bound = opts.lease_ttl + opts.lease_ttl / 3 + opts.heartbeat_timeout + SWEEP_INTERVAL
    while time.monotonic() - killed < bound + 10:
        if taken is None:
            now_held = await holders(kv, opts.shards)
            if all(now_held.get(k) in {s.name for s in survivors} for k in theirs):
                taken = time.monotonic() - killed
                say(f"  its shards taken over after {taken:.1f}s; watching them "
                    f"{opts.heartbeat_timeout:g}s before declaring")
        if len(declared) == len(doomed) and taken is not None:
            break
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)    # a late false alarm would show now
    for sub in subs:
        await sub.unsubscribe()
    latest = max(declared.values(), default=killed) - killed
    figures = KillFigures(victim.name, theirs, taken if taken is not None else -1.0,
                          len(doomed), len(declared), latest, bound, alarms)
    say(f"  {figures.declared}/{figures.doomed} stopped nodes declared DEGRADED, the last "
        f"{latest:.1f}s after the kill (bound {bound:.1f}s: lease {opts.lease_ttl:g}s + a "
        f"lease tick + the watch {opts.heartbeat_timeout:g}s + the sweep tick); false "
        f"alarms: {len(alarms)}")
    return figures
