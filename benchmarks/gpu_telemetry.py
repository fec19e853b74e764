"""Per-GPU telemetry at fleet scale (issue 27 item 5): what it costs the wire, the
control plane and heartbeat ingest, and how fast the GPU API and metrics answer, with
--nodes nodes of --gpus GPUs each publishing a sample every --interval seconds.

One run, one embedded nats-server, one control plane in this process (``bootstrap``, as
``herd up`` builds it, with ``/metrics``); a publisher subprocess plays the agents: the
heartbeats of every node at --rate per second and, in the phases with telemetry on, every
node's ``GpuTelemetry`` at the default interval (one template per node sampled once from
the fake backend, a few readings moved per sample, encoded per send, as an agent does).
Phases alternate telemetry off and on (off, on, off, on, ... --rounds times each) at the
same heartbeat rate, so every on/off figure is measured in the same run:

- bytes per node per minute on the wire (the publisher's PUB frames, subject and body);
- the control plane's CPU (this process, every thread, from /proc: CPU seconds, not wall
  time) per second and per heartbeat, its RSS before and after it holds every sample;
- heartbeats accepted per second, telemetry on beside off (target >= 0.9);
- ``herd gpu list`` over every GPU (a real ``python -m herdbook.cli`` process, start
  included, wall time; target <= 1 s) beside a minimal nats-py + msgspec client reading
  the same pages (its limit), each after a fresh sample of every node (cold caches, as
  at the default interval a listing finds every node's sample new);
- ``/metrics`` and ``/metrics/gpus`` (every shard of --shards, and with --full-gpu-page
  the whole page at once) scraped by a client process: wall time, size, the control plane's CPU.

Everything it creates is under one /tmp/herd-bench-* directory, deleted at the end.

    python -m benchmarks.gpu_telemetry --nodes 10000 --gpus 8 --interval 15 --rate 25000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as NATS

from benchmarks.common import cpu_seconds, free_port, machine, rss_mb, start_server, stop_server
from herdbook.agent.fake_nvml import FakeNvml
from herdbook.agent.telemetry_sampler import sample
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import GpuInfo, NodeBootChecked, NodeInfo, NodeRegistered
from herdbook.events.store import subject_of
from herdbook.events.subjects import heartbeat_subject, telemetry_subject

BOOT = "b1"
FILL_RATE = 5_000
"""Samples per second when every node sends one at once (``fill``): fast, but below what
would make nats-server cut the control plane off as a slow consumer."""
TICK = 0.01
HB_INTERVAL = 10.0
"""The agent's default heartbeat interval (a third of the default 30 s timeout)."""
LIST_TARGET = 1.0
PROBE = 0.001
INGEST_TARGET = 0.9


def node_id(i: int) -> str:
    return f"gpu-{i:06d}"


# --- the publisher (a subprocess: its CPU is not the control plane's) ----------------------


class Publisher:
    """Every node's heartbeat and telemetry from one process, driven by commands on stdin:
    ``phase on|off SECONDS``, ``fill``, ``quit``; each answers one line on stdout."""

    def __init__(self, nc: NATS, nodes: int, gpus: int, rate: float, interval: float) -> None:
        self.nc = nc
        self.rate = rate
        self.tel_rate = nodes / interval
        self.ids = [node_id(i) for i in range(nodes)]
        self.hb_subjects = [heartbeat_subject(n) for n in self.ids]
        self.tel_subjects = [telemetry_subject(n) for n in self.ids]
        # One sample per node through the fake backend (every field present: the largest
        # sample NVML gives), moved a little on every send.
        self.templates = [sample(FakeNvml(gpus, seed=n), n, BOOT, 0.0, n) for n in self.ids]
        self.sent = [0] * nodes
        self.hb_next = 0
        self.hb_seq = 1
        self.tel_next = 0

    def body(self, i: int) -> bytes:
        k = self.sent[i] = self.sent[i] + 1
        t = self.templates[i]
        readings = tuple(msgspec.structs.replace(
            r, temperature_c=(r.temperature_c or 40.0) + k % 7,
            power_w=(r.power_w or 80.0) + k % 13, gpu_util_pct=float((k * 7 + r.index) % 101),
            fb_used_mib=(r.fb_used_mib or 512.0) + k % 1000) for r in t.gpus)
        return encode(msgspec.structs.replace(t, sampled_at=time.time(), gpus=readings))

    async def send_telemetry(self) -> int:
        i = self.tel_next
        self.tel_next = (i + 1) % len(self.ids)
        body = self.body(i)
        subject = self.tel_subjects[i]
        await self.nc.publish(subject, body)
        # What the client writes: PUB <subject> <size>\r\n<body>\r\n
        return len(f"PUB {subject} {len(body)}\r\n") + len(body) + 2

    async def send_heartbeat(self) -> int:
        i = self.hb_next
        body = encode(Heartbeat(node_id=self.ids[i], boot_id=BOOT, seq=self.hb_seq,
                                gpu_count=8, max_temp_c=55.0, sent_at=time.time()))
        self.hb_next = i + 1
        if self.hb_next == len(self.ids):
            self.hb_next, self.hb_seq = 0, self.hb_seq + 1
        subject = self.hb_subjects[i]
        await self.nc.publish(subject, body)
        return len(f"PUB {subject} {len(body)}\r\n") + len(body) + 2

    async def phase(self, seconds: float, telemetry: bool) -> dict[str, float]:
        return await self.send(seconds, self.rate, self.tel_rate if telemetry else 0.0)

    async def background(self, telemetry: bool, stop: asyncio.Event) -> None:
        """Between phases the fleet goes on at its defaults (a heartbeat every 10 s, a
        sample every --interval): no node times out while the CLI and scrapes run."""
        await self.send(float("inf"), len(self.ids) / HB_INTERVAL,
                        self.tel_rate if telemetry else 0.0, stop)

    async def send(self, seconds: float, rate: float, tel_rate: float,
                   stop: asyncio.Event | None = None) -> dict[str, float]:
        hb = tel = 0
        hb_bytes = tel_bytes = 0
        start = time.monotonic()
        # Stopped by a flag, not by cancelling: a cancelled background task was seen to
        # run on (the cancel lost inside nats-py's publish or flush) and the run hung.
        while (elapsed := time.monotonic() - start) < seconds and not (stop and stop.is_set()):
            want_hb, want_tel = int(rate * elapsed), int(tel_rate * elapsed)
            while hb < want_hb or tel < want_tel:
                # Interleaved: each kind at its own rate, as a fleet's agents would send.
                if tel < want_tel and (hb >= want_hb or tel * rate <= hb * tel_rate):
                    tel_bytes += await self.send_telemetry()
                    tel += 1
                else:
                    hb_bytes += await self.send_heartbeat()
                    hb += 1
            await self.nc.flush()
            await asyncio.sleep(max(0.0, TICK - (time.monotonic() - start - elapsed)))
        return {"seconds": time.monotonic() - start, "heartbeats": hb, "hb_bytes": hb_bytes,
                "samples": tel, "tel_bytes": tel_bytes}

    async def fill(self) -> dict[str, float]:
        """One sample of every node, at ``FILL_RATE``."""
        start = time.monotonic()
        tel_bytes = 0
        self.tel_next = 0
        for n in range(len(self.ids)):
            tel_bytes += await self.send_telemetry()
            if n % 100 == 99:
                await self.nc.flush()
                behind = start + n / FILL_RATE - time.monotonic()
                if behind > 0:
                    await asyncio.sleep(behind)
        await self.nc.flush()
        return {"seconds": time.monotonic() - start, "samples": len(self.ids),
                "tel_bytes": tel_bytes}


async def publisher_main(url: str, nodes: int, gpus: int, rate: float, interval: float) -> None:
    nc = await nats.connect(url, pending_size=16 * 1024 * 1024)
    pub = Publisher(nc, nodes, gpus, rate, interval)
    sample_size = len(encode(pub.templates[0]))
    background_telemetry = False
    stop = asyncio.Event()
    background = asyncio.create_task(pub.background(background_telemetry, stop))
    print(msgspec.json.encode({"ready": True, "sample_bytes": sample_size}).decode(), flush=True)
    while True:
        line = (await asyncio.to_thread(sys.stdin.readline)).split()
        stop.set()
        await background
        stop = asyncio.Event()
        if not line or line[0] == "quit":
            break
        if line[0] == "phase":
            out = await pub.phase(float(line[2]), line[1] == "on")
        elif line[0] == "background":
            background_telemetry = line[1] == "on"
            out = {}
        else:
            out = await pub.fill()
        background = asyncio.create_task(pub.background(background_telemetry, stop))
        print(msgspec.json.encode(out).decode(), flush=True)
    await nc.close()


# --- the control plane side -----------------------------------------------------------------


async def register(url: str, nodes: int, gpus: int) -> None:
    """Every node registered with its GPUs (as its agent would) and booted, so its
    heartbeats count and its samples are kept."""
    nc = await nats.connect(url)
    await ensure_streams(nc, 1, 3600.0)
    for i in range(nodes):
        n = node_id(i)
        info = NodeInfo(hostname=n, arch="x86_64", cpus=64, labels={"pool": "h100"},
                        gpus=tuple(GpuInfo(index=g, uuid=f"GPU-{n}-{g}", name="NVIDIA H100 80GB HBM3",
                                           memory_bytes=80 * 1024**3,
                                           driver_version="550.54.15-fake")
                                   for g in range(gpus)))
        for event in (NodeRegistered(node_id=n, boot_id=BOOT, info=info),
                      NodeBootChecked(node_id=n, boot_id=BOOT, passed=True)):
            await nc.publish(subject_of(event), encode(event))
        if i % 2_000 == 0:
            await nc.flush()
    await nc.flush()
    await nc.close()


FLOOR = r"""
import asyncio, sys
sys.modules["aiohttp"] = None   # as the CLI: nats-py without its websocket transport
import nats
async def main(url, printed):
    nc = await nats.connect(url)
    token = None
    while True:
        ask = b"{}" if token is None else b'{"next_token":"%s"}' % token
        page = (await nc.request("herd.api.v1.gpu.list", ask, timeout=60)).data
        token = page[page.rfind(b'"next_token":') + 13:-2].strip(b'"')
        if token == b"null":
            break
    await nc.close()
    with open(printed, "rb") as f:
        sys.stdout.buffer.write(f.read())
asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
"""The listing's floor: a bare nats-py client that asks for the same pages one after the
other (its token read from the page's end, nothing decoded) and writes the bytes the
``herd gpu list`` before it printed: the process start, the control plane building every
page, the transfer and the write, and nothing of the CLI's own work."""


SCRAPER = r"""
import sys, time, urllib.error, urllib.request
start = time.monotonic()
try:
    with urllib.request.urlopen(sys.argv[1], timeout=600) as reply:
        size, code = len(reply.read()), reply.status
except urllib.error.HTTPError as err:
    size, code = 0, err.code
print(code, time.monotonic() - start, size)
"""
"""A scrape as Prometheus makes it: connect, GET, read the whole body; wall time."""


@dataclass
class Snap:
    wall: float
    cpu: float
    server_cpu: float
    accepted: int
    samples: int

    def __sub__(self, other: Snap) -> Snap:
        return Snap(self.wall - other.wall, self.cpu - other.cpu,
                    self.server_cpu - other.server_cpu, self.accepted - other.accepted,
                    self.samples - other.samples)


@dataclass
class Phase:
    telemetry: bool
    delta: Snap
    pub: dict[str, float]

    # Per second of the publisher's phase: what it sent in that time, and what the control
    # plane accepted of it and spent on it (measured until it arrived, the settle included).
    @property
    def accepted_per_s(self) -> float:
        return self.delta.accepted / self.pub["seconds"]

    @property
    def offered_per_s(self) -> float:
        return self.pub["heartbeats"] / self.pub["seconds"]

    @property
    def cpu_per_s(self) -> float:
        return self.delta.cpu / self.pub["seconds"]

    @property
    def server_cpu_per_s(self) -> float:
        return self.delta.server_cpu / self.pub["seconds"]

    @property
    def samples_per_s(self) -> float:
        return self.delta.samples / self.pub["seconds"]

    @property
    def us_per_hb(self) -> float:
        return 1e6 * self.delta.cpu / max(self.delta.accepted, 1)


@dataclass
class ListingRuns:
    """``herd gpu list`` runs and its floor's (``FLOOR``), each after a fresh sample of
    every node: wall s, the process's CPU s, the control plane's CPU s meanwhile (its
    background ingest included)."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    plane: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    floor_cpus: list[float] = field(default_factory=list)
    floor_plane: list[float] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{median(self.walls):.2f} s wall (runs {min(self.walls):.2f}-"
                f"{max(self.walls):.2f}; CPU: the CLI {median(self.cpus):.2f} s, the control "
                f"plane {median(self.plane):.2f} s); floor {median(self.floor):.2f} s wall "
                f"(runs {min(self.floor):.2f}-{max(self.floor):.2f}; CPU: the client "
                f"{median(self.floor_cpus):.2f} s, the control plane "
                f"{median(self.floor_plane):.2f} s)")


@dataclass
class Results:
    nodes: int
    gpus: int
    sample_bytes: int = 0
    phases: list[Phase] = field(default_factory=list)
    rss: dict[str, float] = field(default_factory=dict)
    bytes_per_node_min: float = 0.0
    hb_bytes_per_node_min: float = 0.0
    fill_us_per_sample: float = 0.0
    lists: dict[str, ListingRuns] = field(default_factory=dict)
    """output -> the runs of ``herd gpu list -o output`` and of its floor"""
    scrapes: dict[str, list[tuple[float, int, float]]] = field(default_factory=dict)
    """page -> (wall s, bytes, control plane CPU s) per scrape"""
    stalls: dict[str, tuple[float, float]] = field(default_factory=dict)
    """what ran -> the control plane's event loop's longest stall meanwhile and its
    longest garbage collection, seconds"""


class LoopProbe:
    """The event loop's longest stall while it runs: a task that sleeps ``PROBE`` at a
    time, each wake-up's lateness. The control plane ingests heartbeats and samples on
    this loop, so a stall is that long with nothing ingested. Beside it, the longest
    garbage collection meanwhile (``gc.callbacks``): a full one walks every object of
    the process, whatever the code running when it falls due."""

    def __init__(self) -> None:
        self.longest = 0.0
        self.longest_gc = 0.0
        self._gc_start = 0.0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while not self._stop.is_set():
            start = time.monotonic()
            await asyncio.sleep(PROBE)
            self.longest = max(self.longest, time.monotonic() - start - PROBE)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.monotonic()
        else:
            self.longest_gc = max(self.longest_gc, time.monotonic() - self._gc_start)

    def __enter__(self) -> LoopProbe:
        self._task = asyncio.ensure_future(self._run())
        gc.callbacks.append(self._gc)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        gc.callbacks.remove(self._gc)


class Bench:
    def __init__(self, server: Any, plane: Any, pub: asyncio.subprocess.Process,
                 results: Results, tmp: Path) -> None:
        self.server = server
        self.plane = plane
        self.pub = pub
        self.results = results
        self.tmp = tmp
        self.intake = plane.api.gpus.telemetry

    def snap(self) -> Snap:
        return Snap(time.monotonic(), cpu_seconds(os.getpid()), cpu_seconds(self.server.proc.pid),
                    self.plane.sweeper.accepted, self.intake.accepted)

    async def command(self, line: str) -> dict[str, float]:
        assert self.pub.stdin is not None and self.pub.stdout is not None
        self.pub.stdin.write(f"{line}\n".encode())
        await self.pub.stdin.drain()
        if line == "quit":
            return {}
        reply = await self.pub.stdout.readline()
        if not reply:
            raise RuntimeError(f"the publisher stopped during {line!r}")
        out: dict[str, float] = msgspec.json.decode(reply)
        return out

    async def settle(self, samples_wanted: int | None = None, timeout: float = 120.0) -> None:
        """Let what is in flight arrive: the telemetry counted, then a short quiet."""
        if samples_wanted is not None:
            deadline = time.monotonic() + timeout
            while self.intake.accepted < samples_wanted:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the control plane kept {self.intake.accepted} samples "
                                       f"of {samples_wanted} sent")
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)

    async def phase(self, telemetry: bool, seconds: float) -> Phase:
        before = self.snap()
        pub = await self.command(f"phase {'on' if telemetry else 'off'} {seconds}")
        await self.settle(before.samples + int(pub["samples"]))
        phase = Phase(telemetry, self.snap() - before, pub)
        print(f"  telemetry {'on ' if telemetry else 'off'}: {phase.offered_per_s:>8,.0f} hb/s "
              f"offered, {phase.accepted_per_s:>8,.0f} accepted, {pub['samples']:>6,.0f} samples; "
              f"control plane {phase.cpu_per_s:.2f} CPU s/s, {phase.us_per_hb:.1f} µs/heartbeat; "
              f"nats-server {phase.server_cpu_per_s:.2f} CPU s/s", flush=True)
        return phase

    async def fill(self) -> float:
        """A fresh sample of every node; the control plane's CPU µs per sample."""
        before = self.snap()
        pub = await self.command("fill")
        await self.settle(before.samples + int(pub["samples"]))
        delta = self.snap() - before
        return 1e6 * delta.cpu / max(delta.samples, 1)

    async def timed(self, command: list[str], output: Path) -> tuple[float, float, float]:
        """Wall time and CPU of a subprocess writing its stdout to ``output`` (as `> file`
        would: not through a pipe this process, the control plane's, reads), and this
        process's CPU meanwhile."""
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = cpu_seconds(os.getpid())
        start = time.monotonic()
        with output.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(*command, stdout=out,
                                                        stderr=subprocess.PIPE)
            _, err = await proc.communicate()
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:6])}... exited {proc.returncode}: "
                               f"{err.decode()[-2000:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        child = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
        return wall, child, cpu_seconds(os.getpid()) - cpu

    async def gpu_list(self, output: str, runs: int) -> None:
        herd = [sys.executable, "-m", "herdbook.cli", "--server", self.server.url, "gpu", "list",
                "-o", output]
        printed, floor_printed = self.tmp / f"herd-gpu-list.{output}", self.tmp / "floor.out"
        floor = [sys.executable, "-c", FLOOR, self.server.url, str(printed)]
        listing = ListingRuns()
        await self.timed(herd, printed)         # warm the OS's page cache of the imports
        gpus = self.results.nodes * self.results.gpus
        with printed.open("rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        if output == "table" and lines < gpus:
            raise RuntimeError(f"herd gpu list printed {lines} lines for {gpus} GPUs")
        stall = (0.0, 0.0)
        for _ in range(runs):
            await self.fill()                   # every node's sample new: no cached row
            with LoopProbe() as probe:
                wall, cpu, plane_cpu = await self.timed(herd, printed)
            stall = max(stall, (probe.longest, probe.longest_gc))
            listing.walls.append(wall), listing.cpus.append(cpu), listing.plane.append(plane_cpu)
            await self.fill()
            wall, cpu, plane_cpu = await self.timed(floor, floor_printed)
            listing.floor.append(wall), listing.floor_cpus.append(cpu)
            listing.floor_plane.append(plane_cpu)
        self.results.lists[output] = listing
        self.results.stalls[f"herd gpu list -o {output}"] = stall
        print(f"  herd gpu list -o {output}: {listing.summary()}", flush=True)

    async def scrape(self, page: str, runs: int, fresh: bool,
                     label: str | None = None) -> list[tuple[float, int, float]]:
        url = f"http://127.0.0.1:{self.plane.metrics_server.port}{page}"
        out = []
        for _ in range(runs):
            if fresh:
                await self.fill()
            cpu = cpu_seconds(os.getpid())
            with LoopProbe() as probe:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", SCRAPER, url, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE)
                text, err = await proc.communicate()
            label = label or page
            self.results.stalls[label] = max(self.results.stalls.get(label, (0.0, 0.0)),
                                             (probe.longest, probe.longest_gc))
            code, wall, size = text.decode().split()
            if proc.returncode != 0 or code != "200":
                raise RuntimeError(f"GET {page}: exit {proc.returncode}, HTTP {code}: "
                                   f"{err.decode()[-500:]}")
            out.append((float(wall), int(size), cpu_seconds(os.getpid()) - cpu))
        return out

    async def shards(self, shards: int, label: str) -> None:
        """Every shard of the readings page, one after the other, as Prometheus would."""
        await self.fill()
        rows = []
        for shard in range(shards):
            rows += await self.scrape(f"/metrics/gpus?shard={shard}&shards={shards}", 1, False,
                                      label)
        self.results.scrapes[label] = rows


# --- the run ---------------------------------------------------------------------------------


async def phases(bench: Bench, args: argparse.Namespace) -> None:
    """Telemetry off and on, --rounds times, at the same heartbeat rate: the wire's
    bytes, the control plane's CPU and the heartbeats accepted in each."""
    results = bench.results
    print(f"phases of {args.phase_seconds:g} s: telemetry off, on, ... "
          f"({args.rounds} rounds)", flush=True)
    for _ in range(args.rounds):
        for telemetry in (False, True):
            results.phases.append(await bench.phase(telemetry, args.phase_seconds))
    results.rss["after the phases"] = rss_mb(os.getpid())
    on = [p for p in results.phases if p.telemetry]
    on_seconds = sum(p.pub["seconds"] for p in on)
    results.bytes_per_node_min = (sum(p.pub["tel_bytes"] for p in on)
                                  / args.nodes / (on_seconds / 60))
    every = list(results.phases)
    hb_bytes = sum(p.pub["hb_bytes"] for p in every) / sum(p.pub["heartbeats"] for p in every)
    results.hb_bytes_per_node_min = hb_bytes * 60 / HB_INTERVAL


async def run(args: argparse.Namespace) -> Results:
    results = Results(args.nodes, args.gpus)
    server, tmp = start_server()
    print(f"working in {tmp}", flush=True)
    pub: asyncio.subprocess.Process | None = None
    try:
        await register(server.url, args.nodes, args.gpus)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n"
                              f"metrics: {{port: {free_port()}}}\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        try:
            await plane.projector.catch_up(timeout=600)
            while not all(node_id(i) in plane.projector.nodes for i in (0, args.nodes - 1)):
                await asyncio.sleep(0.1)
            pub = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "benchmarks.gpu_telemetry", "--publish-only", server.url,
                "--nodes", str(args.nodes), "--gpus", str(args.gpus), "--rate", str(args.rate),
                "--interval", str(args.interval), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                limit=1 << 20)
            assert pub.stdout is not None
            ready = await pub.stdout.readline()
            if not ready:
                raise RuntimeError("the publisher did not start")
            results.sample_bytes = int(msgspec.json.decode(ready)["sample_bytes"])
            bench = Bench(server, plane, pub, results, tmp)

            print("warm-up (heartbeats only)", flush=True)
            await bench.phase(False, min(3.0, args.phase_seconds))
            results.rss["no sample held"] = rss_mb(os.getpid())
            results.fill_us_per_sample = await bench.fill()
            results.rss["every node's sample held"] = rss_mb(os.getpid())
            if args.only is None:
                await phases(bench, args)
            # From here on the fleet also samples its GPUs at the default interval.
            await bench.command("background on")
            if args.only in (None, "list"):
                print("herd gpu list (each run after a fresh sample of every node)", flush=True)
                for output in args.output:
                    await bench.gpu_list(output, args.runs)
                results.rss["after the listings"] = rss_mb(os.getpid())
            if args.only in (None, "metrics"):
                print("scrapes", flush=True)
                results.scrapes["/metrics"] = await bench.scrape("/metrics", args.runs, True)
            if args.only is None:
                await bench.shards(args.shards, "/metrics/gpus, every shard (fresh samples)")
                await bench.shards(args.shards, "/metrics/gpus, every shard again")
                results.rss["after scraping every shard"] = rss_mb(os.getpid())
                if args.full_gpu_page:
                    results.scrapes["/metrics/gpus, whole page"] = await bench.scrape(
                        "/metrics/gpus", 1, True)
                    results.rss["after the whole page"] = rss_mb(os.getpid())
            await bench.command("quit")
            await pub.wait()
            pub = None
        finally:
            await plane.stop()
    finally:
        if pub is not None and pub.returncode is None:
            pub.kill()
            await pub.wait()
        stop_server(server, tmp)
    return results


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def show_phases(r: Results, line: Callable[[str, str, str], None]) -> None:
    """The off/on phases' table and what they measure."""
    print("| round | telemetry | hb offered/s | hb accepted/s | samples/s | control plane "
          "CPU s/s | µs/heartbeat | nats-server CPU s/s |\n|---|---|---|---|---|---|---|---|")
    for i, p in enumerate(r.phases):
        print(f"| {i // 2 + 1} | {'on' if p.telemetry else 'off'} | {p.offered_per_s:,.0f} | "
              f"{p.accepted_per_s:,.0f} | {p.samples_per_s:,.0f} | "
              f"{p.cpu_per_s:.3f} | {p.us_per_hb:.1f} | {p.server_cpu_per_s:.3f} |")
    on = [p for p in r.phases if p.telemetry]
    off = [p for p in r.phases if not p.telemetry]
    pairs = [b.accepted_per_s / a.accepted_per_s for a, b in zip(off, on, strict=True)]
    ratio = median([p.accepted_per_s for p in on]) / median([p.accepted_per_s for p in off])
    cpu_on, cpu_off = median([p.cpu_per_s for p in on]), median([p.cpu_per_s for p in off])
    us_on, us_off = median([p.us_per_hb for p in on]), median([p.us_per_hb for p in off])
    samples_per_s = median([p.samples_per_s for p in on])
    srv_on = median([p.server_cpu_per_s for p in on])
    srv_off = median([p.server_cpu_per_s for p in off])
    per_sample = 1e6 * (cpu_on - cpu_off) / max(samples_per_s, 1e-9)

    line("bytes per node per minute on the wire",
         f"{r.bytes_per_node_min / 1000:.1f} KB (a sample: {r.sample_bytes:,} bytes body; "
         f"{r.bytes_per_node_min * r.nodes / 60 / 1e6:.2f} MB/s for the fleet)",
         f"heartbeats at the default {HB_INTERVAL:g} s: {r.hb_bytes_per_node_min / 1000:.2f} KB; "
         f"each control-plane replica receives the same bytes again")
    line("control plane CPU, telemetry on vs off",
         f"{cpu_on:.3f} vs {cpu_off:.3f} CPU s/s (+{cpu_on - cpu_off:.3f}: "
         f"{per_sample:.0f} µs per sample; a fill of every node measured alone: "
         f"{r.fill_us_per_sample:.0f} µs per sample)",
         f"nats-server {srv_on:.3f} vs {srv_off:.3f} CPU s/s")
    line("control plane CPU per heartbeat accepted, on vs off",
         f"{us_on:.1f} vs {us_off:.1f} µs (telemetry's CPU included in 'on')",
         f"capacity at equal CPU: {us_off / us_on:.2f} of off")
    verdict = "met" if ratio >= INGEST_TARGET else "MISSED"
    line("heartbeat ingest, telemetry on / off",
         f"{ratio:.3f} ({median([p.accepted_per_s for p in on]):,.0f} vs "
         f"{median([p.accepted_per_s for p in off]):,.0f} accepted/s; per round "
         f"{', '.join(f'{x:.3f}' for x in pairs)})", f"target >= {INGEST_TARGET}: {verdict}")


def show(r: Results, args: argparse.Namespace) -> None:
    gpus = r.nodes * r.gpus
    print(f"\n{r.nodes:,} nodes x {r.gpus} GPUs = {gpus:,} GPUs, telemetry every "
          f"{args.interval:g} s, heartbeats offered at {args.rate:,}/s; {machine()}")
    print("CPU figures are CPU seconds from /proc (user + system, every thread); "
          "times of the CLI and the scrapes are wall time.\n")

    def line(figure: str, value: str, limit: str) -> None:
        print(f"{figure}: {value}   [{limit}]")

    print()
    if r.phases:
        show_phases(r, line)
    rss = ", ".join(f"{k} {v:,.0f} MB" for k, v in r.rss.items())
    held = r.rss["every node's sample held"] - r.rss["no sample held"]
    line("control plane RSS", f"+{held:,.0f} MB with every node's sample held "
         f"({1e6 * held / max(r.nodes, 1) / 1000:.1f} KB per node)", rss)
    for output, listing in r.lists.items():
        verdict = "met" if median(listing.walls) <= LIST_TARGET else "MISSED"
        line(f"herd gpu list -o {output}, {gpus:,} GPUs, process start included",
             listing.summary(), f"target <= {LIST_TARGET:g} s: {verdict}; floor: a bare "
             f"nats-py client asking for the same pages and writing the same bytes, same run")
    for page, rows in r.scrapes.items():
        walls = [w for w, _, _ in rows]
        sizes = [s for _, s, _ in rows]
        cpus = [c for _, _, c in rows]
        if "every shard" in page:
            line(f"{page} ({len(rows)} shards)",
                 f"{sum(walls):.2f} s wall in all, {sum(sizes) / 1e6:,.1f} MB, control plane "
                 f"CPU {sum(cpus):.2f} s; a shard: {median(walls):.3f} s, "
                 f"{median(sizes) / 1e6:.2f} MB", "Prometheus default scrape_timeout 10 s per target")
        else:
            line(page, f"{median(walls):.3f} s wall, {median(sizes) / 1e6:.2f} MB, control "
                 f"plane CPU {median(cpus):.3f} s", "Prometheus default scrape_timeout 10 s")
    for what, (stall, collection) in r.stalls.items():
        line(f"control plane event loop, longest stall during {what}",
             f"{stall * 1000:,.0f} ms (its longest garbage collection meanwhile "
             f"{collection * 1000:,.0f} ms)", "nothing is ingested meanwhile")
    print(f"reproduce: python -m benchmarks.gpu_telemetry --nodes {r.nodes} --gpus {r.gpus} "
          f"--interval {args.interval:g} --rate {args.rate} --phase-seconds {args.phase_seconds:g} "
          f"--rounds {args.rounds} --runs {args.runs} --shards {args.shards}"
          + (" --full-gpu-page" if args.full_gpu_page else "")
          + (f" --only {args.only} --output {','.join(args.output)}" if args.only else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    parser.add_argument("--interval", type=float, default=15.0,
                        help="seconds between a node's samples (the agent's default: 15)")
    parser.add_argument("--rate", type=int, default=25_000, help="heartbeats offered per second")
    parser.add_argument("--phase-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="off/on pairs")
    parser.add_argument("--runs", type=int, default=3, help="herd gpu list runs, scrapes")
    parser.add_argument("--output", default="table,json", help="herd gpu list -o: table, json")
    parser.add_argument("--shards", type=int, default=64, help="/metrics/gpus shards scraped")
    parser.add_argument("--full-gpu-page", action="store_true",
                        help="also scrape /metrics/gpus whole (~8.6 KB per GPU in memory)")
    parser.add_argument("--only", choices=("list", "metrics"),
                        help="measure only herd gpu list (--output, --runs) or only the "
                             "/metrics scrapes (--runs), without the off/on phases: quicker")
    parser.add_argument("--publish-only", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.nodes, args.gpus, args.rate, args.rounds, args.runs, args.shards) < 1 \
            or args.interval <= 0 or args.phase_seconds <= 0:
        parser.error("--nodes, --gpus, --rate, --rounds, --runs, --shards, --interval and "
                     "--phase-seconds must be positive")
    if args.publish_only:
        asyncio.run(publisher_main(args.publish_only, args.nodes, args.gpus, args.rate,
                                   args.interval))
        return
    args.output = [o for o in args.output.split(",") if o]
    if not args.output or set(args.output) - {"table", "json"}:
        parser.error("--output takes table, json or both")
    if args.shards > 4096:
        parser.error("--shards is at most 4096 (what /metrics/gpus takes)")
    show(asyncio.run(run(args)), args)


if __name__ == "__main__":
    main()
