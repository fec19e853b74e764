"""Sustained heartbeat ingest: heartbeats/s a running control plane accepts.

A separate publisher process sends heartbeats for --nodes nodes at --rate per second
(core publish, as agents do) for --seconds; the control plane's sweeper counts what it
accepted. Ingest is sustained when accepted ≈ sent.

``--sizes 10000,50000,100000`` runs each fleet size on a fresh server and prints a table
with the cost per heartbeat: CPU µs of the control plane (this process, every thread)
and of nats-server per heartbeat accepted, which should stay flat as the fleet grows.

``--ramp N`` measures the knee and its limit in the same run: the offered rate starts at
--rate and grows by half N-1 times; at each rate, first a plain nats-py subscriber (a
process that decodes each heartbeat with msgspec and counts it: the least any consumer
of these heartbeats does) and then the control plane take the same heartbeats. The knee
of each is the highest offered rate it kept up with (accepted >= 97 % of offered); the
control plane's knee over the subscriber's is the ratio. Where the publisher offers less
than asked, that is printed: a knee at the publisher's ceiling is "at least".
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

import msgspec
import nats

from benchmarks.common import cpu_seconds, report, sizes_arg, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.heartbeat import Heartbeat
from herdbook.events.node import NodeBootChecked, NodeRegistered
from herdbook.events.store import subject_of


async def publish(url: str, nodes: int, rate: int, seconds: float, first_seq: int = 1) -> None:
    """Prints the heartbeats sent, the seconds it took and the last sequence used (the next
    run starts after it: the control plane drops a sequence it has seen as a replay)."""
    nc = await nats.connect(url)
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    sent = 0
    seq = first_seq - 1
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        seq += 1
        for i in range(nodes):
            await nc.publish(f"herd.hb.n{i}", encode(Heartbeat(
                node_id=f"n{i}", boot_id="b", seq=seq, gpu_count=8, max_temp_c=55.0)))
            sent += 1
            if sent % per_tick == 0:
                await nc.flush()
                behind = start + sent / rate - time.monotonic()
                if behind > 0:
                    await asyncio.sleep(behind)
                if time.monotonic() - start >= seconds:
                    break
    await nc.flush()
    elapsed = time.monotonic() - start
    await nc.close()
    print(sent, elapsed, seq)


async def subscribe(url: str, seconds: float) -> None:
    """The limit: a plain nats-py subscriber decoding each heartbeat (what any consumer of
    them does at least). Prints "ready", then, after the publisher has been quiet for a
    second (or ``seconds`` passed), the heartbeats it decoded and its CPU seconds."""
    decode = msgspec.json.Decoder(Heartbeat).decode
    nc = await nats.connect(url, pending_size=64 * 1024 * 1024)
    count = 0
    last = time.monotonic()

    async def on_beat(msg) -> None:  # type: ignore[no-untyped-def]
        nonlocal count, last
        decode(msg.data)
        count += 1
        last = time.monotonic()

    await nc.subscribe("herd.hb.>", cb=on_beat)
    await nc.flush()
    print("ready", flush=True)
    cpu, start = time.process_time(), time.monotonic()
    while time.monotonic() - start < seconds and (count == 0 or time.monotonic() - last < 1.0):
        await asyncio.sleep(0.1)
    print(count, time.process_time() - cpu, flush=True)
    await nc.close()


_next_seq = [1]


async def offer(url: str, nodes: int, rate: int, seconds: float) -> tuple[int, float]:
    """Run the publisher process: the heartbeats it sent, over how many seconds (its own
    clock, its start not counted). Each run's sequences follow the last run's."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.heartbeat_ingest", "--publish-only", url,
        "--nodes", str(nodes), "--rate", str(rate), "--seconds", str(seconds),
        "--first-seq", str(_next_seq[0]), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode != 0 or not out.strip():
        why = err.decode().strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise SystemExit(f"the publisher failed: {why[0]}")
    sent, elapsed, last = out.decode().strip().splitlines()[-1].split()
    _next_seq[0] = int(last) + 1
    return int(sent), float(elapsed)


async def register(url: str, nodes: int) -> None:
    """Heartbeats of nodes the control plane does not know are dropped uncounted: register
    them (as the agents would) first."""
    nc = await nats.connect(url)
    await ensure_streams(nc, 1, 3600.0)
    for i in range(nodes):
        for event in (NodeRegistered(node_id=f"n{i}", boot_id="b"),
                      NodeBootChecked(node_id=f"n{i}", boot_id="b", passed=True)):
            await nc.publish(subject_of(event), encode(event))
        if i % 10_000 == 0:
            await nc.flush()
    await nc.flush()
    await nc.close()


class Row(NamedTuple):
    nodes: int
    offered: float
    accepted: float
    plane_us: float
    """CPU µs of the control plane (this process) per heartbeat accepted."""
    server_us: float


async def one_size(nodes: int, rate: int, seconds: float) -> Row:
    server, tmp = start_server()
    try:
        await register(server.url, nodes)
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.sweeper is not None and server.proc is not None
        await plane.projector.catch_up(timeout=600)
        base = plane.sweeper.accepted
        start, cpu, server_cpu = time.monotonic(), time.process_time(), cpu_seconds(server.proc.pid)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.heartbeat_ingest", "--publish-only", server.url,
            "--nodes", str(nodes), "--rate", str(rate), "--seconds", str(seconds),
            stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        sent = int(out.decode().strip().splitlines()[-1].split()[0])
        await asyncio.sleep(1.0)    # let the last ones arrive
        elapsed = time.monotonic() - start - 1.0
        accepted = plane.sweeper.accepted - base
        cpu, server_cpu = time.process_time() - cpu, cpu_seconds(server.proc.pid) - server_cpu
        await plane.stop()
        print(f"sent {sent} heartbeats for {nodes} nodes in {elapsed:.1f}s; accepted {accepted} "
              f"({accepted / max(sent, 1):.1%})", flush=True)
        return Row(nodes, sent / elapsed, accepted / elapsed, 1e6 * cpu / max(accepted, 1),
                   1e6 * server_cpu / max(accepted, 1))
    finally:
        stop_server(server, tmp)


class Step(NamedTuple):
    rate: int
    """Asked of the publisher."""
    offered: float
    accepted: float
    limit_offered: float
    limit_accepted: float
    """The plain subscriber's, at the same rate."""
    cpu_us: float
    limit_cpu_us: float
    """CPU µs per heartbeat taken: the control plane's (this process, every thread) and the
    plain subscriber's (its process): steadier than rates on a shared machine."""


def kept_up(offered: float, accepted: float) -> bool:
    return accepted >= 0.97 * offered


async def limit_step(url: str, nodes: int, rate: int,
                     seconds: float) -> tuple[float, float, float]:
    """The plain subscriber beside one publisher run: (offered/s, decoded/s, its CPU µs
    per heartbeat decoded)."""
    sub = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.heartbeat_ingest", "--subscribe-only", url,
        "--seconds", str(seconds + 30), stdout=subprocess.PIPE)
    assert sub.stdout is not None
    assert (await sub.stdout.readline()).strip() == b"ready"
    sent, elapsed = await offer(url, nodes, rate, seconds)
    out, _ = await sub.communicate()
    decoded, cpu = out.decode().split()[:2]
    return sent / elapsed, int(decoded) / elapsed, 1e6 * float(cpu) / max(int(decoded), 1)


async def ramp(nodes: int, rate: int, seconds: float, steps: int) -> list[Step]:
    """The knee: the offered rate grows by half each step until the control plane falls
    behind (and one step past it), each rate taken first by the plain subscriber alone,
    then by the control plane alone, on the same server and fleet."""
    server, tmp = start_server()
    rates = [int(rate * 1.5 ** i) for i in range(steps)]
    try:
        await register(server.url, nodes)
        limits = [await limit_step(server.url, nodes, r, seconds) for r in rates]
        config = parse_config(f"nats: {{url: '{server.url}'}}\ndata_dir: '{tmp / 'd'}'\n")
        plane = bootstrap(config, clock=SYSTEM_CLOCK)
        await plane.start()
        assert plane.sweeper is not None
        await plane.projector.catch_up(timeout=600)
        out: list[Step] = []
        for r, (limit_offered, limit_accepted, limit_cpu) in zip(rates, limits, strict=True):
            base, cpu = plane.sweeper.accepted, time.process_time()
            sent, elapsed = await offer(server.url, nodes, r, seconds)
            await asyncio.sleep(1.0)    # let the last ones arrive
            taken = plane.sweeper.accepted - base
            step = Step(r, sent / elapsed, taken / elapsed, limit_offered, limit_accepted,
                        1e6 * (time.process_time() - cpu) / max(taken, 1), limit_cpu)
            out.append(step)
            # a backlog left by a step it fell behind in must not count in the next one
            while True:
                before = plane.sweeper.accepted
                await asyncio.sleep(0.5)
                if plane.sweeper.accepted == before:
                    break
            print(f"asked {r:,}/s: control plane {step.accepted:,.0f}/s of {step.offered:,.0f}/s "
                  f"offered; plain subscriber {limit_accepted:,.0f}/s of "
                  f"{limit_offered:,.0f}/s", flush=True)
            if not kept_up(step.offered, step.accepted) and len(out) > 1 and not kept_up(
                    out[-2].offered, out[-2].accepted):
                break                   # two steps past the knee: enough
        await plane.stop()
        return out
    finally:
        stop_server(server, tmp)


def knee(pairs: list[tuple[float, float]]) -> tuple[float, bool]:
    """The highest offered rate kept up with, and whether a higher one was not (False: the
    knee is at least this, the publisher's ceiling or the last step)."""
    best, fell = 0.0, False
    for offered, accepted in pairs:
        if kept_up(offered, accepted):
            best = max(best, offered)
        else:
            fell = True
    return best, fell


def caveat(plane_fell: bool, limit_fell: bool) -> str:
    if plane_fell and limit_fell:
        return ""
    if not plane_fell and not limit_fell:
        return ("; neither fell behind: both knees are at least the publisher's ceiling "
                "(raise --rate or --ramp)")
    return ("; the limit never fell behind: the ratio is at most this" if plane_fell else
            "; the control plane never fell behind: the ratio is at least this")


async def main_ramp(nodes: int, rate: int, seconds: float, steps: int) -> None:
    out = await ramp(nodes, rate, seconds, steps)
    print("\n| asked/s | offered/s | control plane accepted/s | | plain subscriber "
          "decoded/s (offered/s) | | CPU µs/heartbeat, control plane | plain subscriber |"
          "\n|---|---|---|---|---|---|---|---|")
    for s in out:
        print(f"| {s.rate:,} | {s.offered:,.0f} | {s.accepted:,.0f} | "
              f"{s.accepted / s.offered:.1%} | {s.limit_accepted:,.0f} ({s.limit_offered:,.0f}) "
              f"| {s.limit_accepted / s.limit_offered:.1%} | {s.cpu_us:.1f} | "
              f"{s.limit_cpu_us:.1f} |")
    plane, plane_fell = knee([(s.offered, s.accepted) for s in out])
    limit, limit_fell = knee([(s.limit_offered, s.limit_accepted) for s in out])
    ceiling = max(s.offered for s in out)

    def said(rate: float, fell: bool) -> str:
        return f"{rate:,.0f}/s" if fell else f"at least {rate:,.0f}/s (never fell behind)"
    print(f"knee (highest offered rate kept up with, >= 97 %): control plane "
          f"{said(plane, plane_fell)}; plain nats-py subscriber {said(limit, limit_fell)}; "
          f"the publisher offered at most {ceiling:,.0f}/s")
    # The knee moves in the ramp's steps; the most each took in any step (behind or not)
    # is its capacity, read between the steps.
    most, limit_most = max(s.accepted for s in out), max(s.limit_accepted for s in out)
    print(f"the most accepted in a step: control plane {most:,.0f}/s, plain subscriber "
          f"{limit_most:,.0f}/s: ratio {most / max(limit_most, 1):.2f}")
    cpu = statistics.median(s.cpu_us for s in out)
    limit_cpu = statistics.median(s.limit_cpu_us for s in out)
    print(f"CPU per heartbeat (median of the steps): control plane {cpu:.1f} µs, plain "
          f"subscriber {limit_cpu:.1f} µs: ratio {limit_cpu / cpu:.2f}")
    report("heartbeat ingest knee", f"{plane:,.0f}/s against the plain subscriber's "
           f"{limit:,.0f}/s in the same run: ratio {plane / max(limit, 1):.2f}; most "
           f"accepted in a step {most:,.0f}/s against {limit_most:,.0f}/s: "
           f"{most / max(limit_most, 1):.2f} ({nodes:,} nodes)" + caveat(plane_fell, limit_fell),
           ">= 0.7 of the limit",
           f"python -m benchmarks.heartbeat_ingest --nodes {nodes} --rate {rate} "
           f"--seconds {seconds:g} --ramp {steps}")


async def main(sizes: list[int], rate: int, seconds: float) -> None:
    rows = [await one_size(nodes, rate, seconds) for nodes in sizes]
    print("\n| nodes | offered/s | accepted/s | accepted | control plane CPU µs/heartbeat "
          "| nats-server CPU µs/heartbeat |\n|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.nodes:,} | {row.offered:,.0f} | {row.accepted:,.0f} | "
              f"{row.accepted / max(row.offered, 1):.1%} | {row.plane_us:.1f} | {row.server_us:.1f} |")
    last = rows[-1]
    report("heartbeat ingest", f"{last.accepted:,.0f} heartbeats/s accepted of {last.offered:,.0f}/s "
           f"offered ({last.nodes:,} nodes)", ">= 20,000/s",
           f"python -m benchmarks.heartbeat_ingest --sizes {','.join(map(str, sizes))} "
           f"--rate {rate} --seconds {seconds:g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=200_000, help="one fleet size")
    parser.add_argument("--sizes", type=sizes_arg, help="several fleet sizes, e.g. 10000,50000,100000")
    parser.add_argument("--rate", type=int, default=25_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ramp", type=int, metavar="STEPS",
                        help="the knee: raise the offered rate by half up to STEPS-1 times, "
                             "beside a plain nats-py subscriber (one fleet size)")
    parser.add_argument("--publish-only", metavar="URL")
    parser.add_argument("--first-seq", type=int, default=1)
    parser.add_argument("--subscribe-only", metavar="URL")
    args = parser.parse_args()
    if args.publish_only:
        asyncio.run(publish(args.publish_only, args.nodes, args.rate, args.seconds,
                            args.first_seq))
    elif args.subscribe_only:
        asyncio.run(subscribe(args.subscribe_only, args.seconds))
    elif args.ramp is not None:
        if args.nodes < 1 or args.rate < 1 or args.seconds <= 0 or args.ramp < 1:
            parser.error("--nodes, --rate, --seconds and --ramp must be positive")
        asyncio.run(main_ramp(args.nodes, args.rate, args.seconds, args.ramp))
    else:
        if args.nodes < 1 or args.rate < 1 or args.seconds <= 0:
            parser.error("--nodes, --rate and --seconds must be positive")
        asyncio.run(main(args.sizes or [args.nodes], args.rate, args.seconds))
