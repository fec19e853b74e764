"""What idle agents cost nats-server: its RSS and CPU with no agents, then with AGENTS
agents connected, side by side in the same run, and every message that crossed the
server meanwhile (an agent holds no JetStream consumer, so idle means silent). Beside
it, on fresh servers: bare connections (what any reachable agent costs: nats-server's
own per-connection memory) and, on request, agents that each hold a JetStream consumer
(the way agents followed their allocations before).

Each simulated agent is what `herd agent` holds on the server once registered: one NATS
connection with the agent's options (reconnect for ever), its subscriptions (its
allocation events ``herd.alloc.<node>.>``, its boot_started and wipe_started events,
fault injection, fingerprint requests) and the catch-up request it makes on (re)connect
(``herd.sync.<node>.allocs``), answered here by the control plane's ``AgentSync``. Its
heartbeats are left out on purpose: they are measured by benchmarks/heartbeat_ingest.py.
All agents live in this one process (one file descriptor each, checked up front).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client as NATS

from benchmarks.common import cpu_seconds, report, rss_mb, start_server, stop_server
from herdbook.control.agent_sync import AgentSync
from herdbook.control.nats_parts import ensure_streams
from herdbook.events.codec import encode
from herdbook.events.subjects import (
    aggregate_filter,
    event_subject,
    fingerprint_subject,
    inject_subject,
    sync_subject,
)
from herdbook.events.sync import SyncRequest, sync_reply_decoder

CONNECTING = 100
"""Agents connecting at once (a fleet coming up)."""


async def nothing(msg: Any) -> None:
    return None


async def agent(url: str, node_id: str) -> NATS:
    """One idle agent's footprint on the server, as `herd agent` leaves it."""
    nc = await nats.connect(url, name=f"herd-agent {node_id}", max_reconnect_attempts=-1,
                            reconnect_time_wait=1, connect_timeout=3, allow_reconnect=True)
    for subject in (aggregate_filter("alloc", node_id),
                    event_subject("node", node_id, "boot_started"),
                    event_subject("node", node_id, "wipe_started"),
                    inject_subject(node_id), fingerprint_subject(node_id)):
        await nc.subscribe(subject, cb=nothing)
    reply = await nc.request(sync_subject(node_id), encode(SyncRequest(after=0)), timeout=30)
    if sync_reply_decoder.decode(reply.data).error:
        raise RuntimeError(f"{node_id}: catch-up refused")
    return nc


async def bare(url: str, node_id: str) -> NATS:
    """Only a connection: what any agent that can be reached at all costs the server."""
    return await nats.connect(url, name=f"herd-agent {node_id}", max_reconnect_attempts=-1)


async def with_consumer(url: str, node_id: str) -> NATS:
    """The way agents used to follow their allocations: the agent's footprint plus a
    durable pull consumer of its own, with a long-poll pull always waiting on it."""
    nc = await agent(url, node_id)
    sub = await nc.jetstream().pull_subscribe(aggregate_filter("alloc", node_id),
                                              durable=f"agent-{node_id}")

    async def poll() -> None:
        while nc.is_connected:
            try:
                await sub.fetch(1, timeout=30)
            except Exception:  # noqa: BLE001 - idle: a timeout, then pull again
                pass

    POLLS.append(asyncio.create_task(poll()))
    return nc


POLLS: list[asyncio.Task[None]] = []
VARIANTS: dict[str, tuple[str, Callable[[str, str], Awaitable[NATS]]]] = {
    "connections": ("bare connections (the floor)", bare),
    "agents": ("agents as herd agent holds on", agent),
    "consumers": ("agents + own JetStream consumer (before)", with_consumer),
}


async def connect_all(url: str, count: int,
                      how: Callable[[str, str], Awaitable[NATS]]) -> list[NATS]:
    gate = asyncio.Semaphore(CONNECTING)

    async def one(i: int) -> NATS:
        async with gate:
            return await how(url, f"node-{i:06d}")

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def idle(pid: int, seconds: float, seen: list[int]) -> tuple[float, float, int]:
    """nats-server's RSS (MB) and CPU (share of one core) over ``seconds`` of idling, and
    the messages that crossed it meanwhile."""
    await asyncio.sleep(3.0)    # let what came before settle
    before, cpu0, t0 = seen[0], cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(seconds)
    cpu = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    return rss_mb(pid), cpu, seen[0] - before


def check_descriptors(agents: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = agents + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            raise SystemExit(f"error: {agents} agents need {need} file descriptors; this "
                             f"process may open {hard} (ulimit -n); use fewer --agents")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


async def measure(variant: str, agents: int, seconds: float) -> list[float]:
    """On a fresh server: idle with no agents, then with ``agents`` of ``variant``:
    RSS before/after, CPU before/after, messages before/after, seconds to connect."""
    server, tmp = start_server()
    clients: list[NATS] = []
    control = None
    try:
        assert server.proc is not None
        pid = server.proc.pid
        control = await nats.connect(server.url)
        await ensure_streams(control, 1, 3600.0)
        await AgentSync(control).start()
        seen = [0]

        async def count(msg: Any) -> None:
            seen[0] += 1

        await control.subscribe(">", cb=count)
        rss0, cpu0, msgs0 = await idle(pid, seconds, seen)
        start = time.monotonic()
        clients = await connect_all(server.url, agents, VARIANTS[variant][1])
        took = time.monotonic() - start
        rss1, cpu1, msgs1 = await idle(pid, seconds, seen)
        return [rss0, rss1, cpu0, cpu1, msgs0, msgs1, took]
    finally:
        for task in POLLS:
            task.cancel()
        POLLS.clear()
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
        if control is not None:
            await control.close()
        stop_server(server, tmp)


async def main(agents: int, seconds: float, variants: list[str]) -> None:
    check_descriptors(agents)
    per = 1000 / agents
    rows = {v: await measure(v, agents, seconds) for v in variants}
    print(f"\nnats-server idle for {seconds:g}s, each on a fresh server: none, then "
          f"{agents:,} connected")
    print(f"{'':<42}{'RSS MB':>15}{'+MB/1k':>8}{'CPU %core':>17}{'+/1k':>8}{'msgs':>10}")
    for v, (rss0, rss1, cpu0, cpu1, msgs0, msgs1, took) in rows.items():
        print(f"{VARIANTS[v][0]:<42}{rss0:>7.1f} →{rss1:>6.1f}{(rss1 - rss0) * per:>8.1f}"
              f"{cpu0:>8.2%} →{cpu1:>7.2%}{(cpu1 - cpu0) * per:>+8.2%}"
              f"{int(msgs0):>5} →{int(msgs1):>3}   (connected in {took:.1f}s)")
    if "agents" in rows:
        rss0, rss1, cpu0, cpu1, _, msgs1, _ = rows["agents"]
        floor = rows.get("connections")
        beyond = (f", {(rss1 - rss0 - (floor[1] - floor[0])) * per:+.1f} MB beyond bare "
                  f"connections" if floor else "")
        report("idle agents",
               f"nats-server {(rss1 - rss0) * per:+.1f} MB RSS{beyond} and "
               f"{(cpu1 - cpu0) * per:+.2%} of a core per 1,000 idle agents, {int(msgs1)} "
               f"messages in {seconds:g}s ({agents:,} agents)",
               "nothing measurable beyond the connection: no consumer, no traffic at idle",
               f"python -m benchmarks.idle_agents --agents {agents} --seconds {seconds:g} "
               f"--variants {','.join(variants)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=10_000, help="simulated agents")
    parser.add_argument("--seconds", type=float, default=20.0, help="idle window measured")
    parser.add_argument("--variants", default="connections,agents",
                        help=f"comma-separated, of {', '.join(VARIANTS)} (consumers: the old "
                             "way, for contrast; slow to set up at 10,000)")
    args = parser.parse_args()
    chosen = [v for v in args.variants.split(",") if v]
    if args.agents < 1 or args.seconds <= 0:
        parser.error("--agents must be at least 1 and --seconds above 0")
    if not chosen or any(v not in VARIANTS for v in chosen):
        parser.error(f"--variants: choose among {', '.join(VARIANTS)}")
    asyncio.run(main(args.agents, args.seconds, chosen))
