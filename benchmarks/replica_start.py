"""Replica start: seconds from ``bootstrap`` to a control plane that answers
``node.list``, with an empty data dir and N events in HERD_EVENTS, without a view
snapshot (the view is folded from sequence 1) and with one (restored, then only the
tail is folded). The two alternate ``--rounds`` times per size; medians printed.

The log is filled with core publishes (no Nats-Msg-Id: nothing here needs the dedupe,
and it halves the time to fill 1M events); a snapshot is written by ``SnapshotWriter``
when ``--tail`` events are still to come. Everything lives under /tmp/herd-bench-* and
is deleted at the end."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import time
from pathlib import Path

import msgspec
import nats
from nats.aio.client import Client as NATS

from benchmarks.common import report, sizes_arg, start_server, stop_server
from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import ViewConfig, parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.nats_parts import ensure_streams
from herdbook.control.snapshots import SnapshotWriter
from herdbook.events.codec import encode
from herdbook.events.node import NodeApproved, NodeDegraded, NodeInfo, NodeRecovered, NodeRegistered
from herdbook.events.store import stream_last_seq, subject_of
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.projector.projection import ProjectorRunner

INFO = NodeInfo(hostname="h", arch="x86_64", cpus=64, memory_bytes=1 << 40, labels={"zone": "a"})


def message(i: int, nodes: int, cache: dict[tuple[int, int], tuple[str, bytes]]) -> tuple[str, bytes]:
    """The i-th event of a history of registrations and flaps over ``nodes`` nodes (each
    (node, kind) encoded once: 1M fresh encodes would take longer than the publishes)."""
    key = ((i // 4) * 7919 % nodes, i % 4)
    if key not in cache:
        node_id, kind = f"node-{key[0]}", key[1]
        event = (NodeRegistered(node_id=node_id, boot_id="b", info=INFO) if kind == 0 else
                 NodeApproved(node_id=node_id) if kind == 1 else
                 NodeDegraded(node_id=node_id, heartbeat_age=31.0) if kind == 2 else
                 NodeRecovered(node_id=node_id))
        cache[key] = (subject_of(event), encode(event))
    return cache[key]


async def fill(nc: NATS, end: int, nodes: int,
               cache: dict[tuple[int, int], tuple[str, bytes]]) -> int:
    """Publish until the stream holds ``end`` events; returns its last sequence. Core
    publishes the server did not store (it may drop some under load) are sent again."""
    js = nc.jetstream()
    last = await stream_last_seq(js, EVENTS_STREAM)
    while last < end:
        for i in range(last, end):
            subject, data = message(i, nodes, cache)
            await nc.publish(subject, data)
            if i % 5_000 == 0:
                await nc.flush()
        await nc.flush()
        previous = -1
        while last != previous:     # until the server stored what it got
            previous = last
            await asyncio.sleep(0.5)
            last = await stream_last_seq(js, EVENTS_STREAM)
    return last


async def snapshot(nc: NATS, work: Path) -> tuple[int, float]:
    """Fold the log as it is into a view and snapshot it: (compressed bytes, seconds to
    copy, compress and upload)."""
    work.mkdir(exist_ok=True)
    runner = ProjectorRunner(nc, str(work / "view.db"))
    await runner.start()
    await runner.catch_up(timeout=600)
    await runner.stop()     # a rebuild's view is in place once the projector stopped
    writer = SnapshotWriter(nc, work / "view.db", lambda: runner.committed_seq, ViewConfig(),
                            clock=SYSTEM_CLOCK)
    started = time.monotonic()
    snap = await writer.snapshot()
    seconds = time.monotonic() - started
    assert snap is not None
    info = await (await nc.jetstream().object_store("HERD_VIEW_SNAPSHOTS")).get_info(snap.name)
    return int(info.size or 0), seconds


async def time_to_serving(url: str, data_dir: Path, snapshots: bool,
                          local_view: Path | None = None) -> tuple[float, int]:
    """Seconds from bootstrap to a node.list answer, and the nodes it counts. With
    ``local_view``: that file is the data dir's view already (a restart, not a new replica)."""
    if local_view is not None:
        data_dir.mkdir()
        shutil.copyfile(local_view, data_dir / "view.db")
    config = parse_config(f"nats: {{url: '{url}'}}\ndata_dir: '{data_dir}'\n"
                          f"node_id: bench-replica\nview: {{snapshots: {str(snapshots).lower()}}}\n")
    started = time.monotonic()
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        reply = await plane.nc.request("herd.api.v1.node.list", b'{"limit": 1}', timeout=30)
        elapsed = time.monotonic() - started
        body = msgspec.json.decode(reply.data)
        assert body.get("ok"), body
        return elapsed, len(plane.projector.nodes)
    finally:
        await plane.stop()


async def one_size(events: int, nodes: int, tail: int, rounds: int
                   ) -> tuple[float, float, float]:
    server, tmp = start_server()
    try:
        nc = await nats.connect(server.url)
        await ensure_streams(nc, 1, 3600.0)
        cache: dict[tuple[int, int], tuple[str, bytes]] = {}
        tail = min(tail, events - 1)
        filled = time.monotonic()
        await fill(nc, events - tail, nodes, cache)
        fill_seconds = time.monotonic() - filled
        size, write_seconds = await snapshot(nc, tmp / "snapshot")
        last = await fill(nc, events, nodes, cache)
        await nc.close()
        without: list[float] = []
        with_: list[float] = []
        local: list[float] = []
        counted = set()
        for n in range(rounds):
            for snapshots, figures, seed in ((False, without, None), (True, with_, None),
                                             (False, local, tmp / "snapshot" / "view.db")):
                seconds, count = await time_to_serving(
                    server.url, tmp / f"plane-{n}-{len(figures)}-{snapshots}-{seed is None}",
                    snapshots, seed)
                figures.append(seconds)
                counted.add(count)
        assert len(counted) == 1, f"the starts disagree on the nodes: {counted}"
        a, b, c = (statistics.median(x) for x in (without, with_, local))
        print(f"  {last:>9,} events ({tail:,} after the snapshot), {counted.pop():,} nodes: "
              f"serving in {a:6.2f} s without a snapshot, {b:6.2f} s with one ({a / b:.1f}x); "
              f"limit (the view at the snapshot's sequence already on disk) {c:.2f} s; "
              f"snapshot {size / 1e6:.1f} MB written in {write_seconds:.2f} s")
        print(f"    runs without {', '.join(f'{x:.2f}' for x in without)}; with "
              f"{', '.join(f'{x:.2f}' for x in with_)}; limit {', '.join(f'{x:.2f}' for x in local)}; "
              f"log filled in {fill_seconds:.0f} s")
        return a, b, c
    finally:
        stop_server(server, tmp)


async def main(sizes: list[int], nodes: int, tail: int, rounds: int) -> None:
    results = [await one_size(size, nodes, tail, rounds) for size in sizes]
    without, with_, local = results[-1]
    report("replica start", f"{with_:.2f} s with a snapshot, {without:.2f} s without "
           f"({sizes[-1]:,} events, {tail:,} after the snapshot); limit {local:.2f} s",
           "with a snapshot: O(tail), near the limit and flat across sizes; without: O(events)",
           f"python -m benchmarks.replica_start --events {','.join(map(str, sizes))} "
           f"--nodes {nodes} --tail {tail} --rounds {rounds}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=sizes_arg, default=[100_000],
                        help="events in the log; several sizes comma-separated, e.g. 100000,1000000")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--tail", type=int, default=10_000, help="events after the snapshot")
    parser.add_argument("--rounds", type=int, default=2, help="without/with pairs per size")
    args = parser.parse_args()
    if args.nodes < 1 or args.tail < 1 or args.rounds < 1:
        parser.error("--nodes, --tail and --rounds must be positive")
    asyncio.run(main(args.events, args.nodes, args.tail, args.rounds))
