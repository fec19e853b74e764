"""Liveness shards on a real nats-server (DESIGN §10, docs/scale.md): the server's
subject mapping and ``shard_of`` agree; a replica refuses shards the server does not
make; the stream stores, and the authority binds, the mapped heartbeat subjects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from herdbook.events.authority import bind_node_report
from herdbook.events.hb_shards import shard_of
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.reactors.heartbeat_intake import MappingMissing, check_mapping
from tests.servers import client_with_streams, started_nats

SHARDS = 2


@pytest.fixture
def sharded_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    with started_nats(tmp_path, liveness_shards=SHARDS) as server:
        yield server


@pytest.fixture
async def snc(sharded_server: EmbeddedNats) -> AsyncIterator[Any]:
    async with client_with_streams(sharded_server.url) as client:
        yield client


async def test_the_server_partitions_heartbeats_as_shard_of_says(snc: Any) -> None:
    ids = [f"node-{i}" for i in range(64)] + ["gpu-a100-7f3e", "x"]
    arrived: dict[str, str] = {}

    async def heard(msg: Any) -> None:
        arrived[msg.subject.split(".", 3)[3]] = msg.subject
    await snc.subscribe("herd.hb.*.*", cb=heard)
    for node_id in ids:
        await snc.publish(f"herd.hb.{node_id}", b"{}")   # as the agent publishes
    await snc.flush()
    for _ in range(50):
        if len(arrived) == len(ids):
            break
        await asyncio.sleep(0.02)
    assert arrived == {n: f"herd.hb.{shard_of(n, SHARDS)}.{n}" for n in ids}
    assert len({shard_of(n, SHARDS) for n in ids}) == SHARDS
    # HERD_HEARTBEATS keeps the mapped subject, and its node id is still bound from it.
    js = snc.jetstream()
    msg = await js.get_last_msg("HERD_HEARTBEATS", f"herd.hb.{shard_of('x', SHARDS)}.x")
    bind_node_report(msg.subject, "x")
    await check_mapping(snc, SHARDS)     # the start's check passes
    with pytest.raises(MappingMissing, match="does not map herd.hb"):
        await check_mapping(snc, 3)      # another count is caught too


async def test_a_sharded_replica_refuses_a_server_without_the_mapping(nc: Any) -> None:
    with pytest.raises(MappingMissing, match="liveness_shards is 2 .* arrived as herd.hb"):
        await check_mapping(nc, 2)
    # the probes left nothing behind for a reader to dead-letter
    info = await nc.jetstream().stream_info("HERD_HEARTBEATS")
    assert info.state.messages == 0


def replica_yaml(tmp_path: Path, name: str, url: str) -> str:
    return f"""
nats: {{url: "{url}"}}
data_dir: "{tmp_path / name}"
node_id: {name}
leader_ttl: 1.5s
lifecycle: {{heartbeat_timeout: 1s, heartbeat_timeout_sensitive: 1s, liveness_shards: 2,
            sweep_interval: 50ms, grace_period: {{standard: 30s}}}}
view: {{snapshots: false}}
metrics: {{port: 0}}
http: {{port: 0}}
"""


async def ready_node(plane: Any, node_id: str) -> None:
    from herdbook.events.node import NodeBootChecked, NodeInfo, NodeRegistered
    await plane.store.append(NodeRegistered(node_id=node_id, boot_id="b1", info=NodeInfo()))
    await plane.store.append(NodeBootChecked(node_id=node_id, boot_id="b1", passed=True))


async def beat(nc: Any, node_id: str, seq: int) -> None:
    from herdbook.events.codec import encode
    from herdbook.events.heartbeat import Heartbeat
    await nc.publish(f"herd.hb.{node_id}", encode(Heartbeat(node_id=node_id, boot_id="b1",
                                                            seq=seq)))


async def events_of(nc: Any, node_id: str, name: str, *, settled: bool = False) -> int:
    from tests.conftest import settle
    if not settled:
        await settle(nc)
    js = nc.jetstream()
    info = await js.stream_info("HERD_EVENTS", subjects_filter=f"herd.node.{node_id}.{name}")
    return sum((info.state.subjects or {}).values())


@pytest.mark.timeout(120)
async def test_two_replicas_share_the_shards_and_one_takes_over_after_the_watch(
        tmp_path: Path, sharded_server: EmbeddedNats, snc: Any) -> None:
    from tests.conftest import poll
    from tests.integration.conftest import running_plane
    async with running_plane(replica_yaml(tmp_path, "ra", sharded_server.url)) as a, \
            running_plane(replica_yaml(tmp_path, "rb", sharded_server.url)) as b:
        await poll(lambda: len(a.sweeper.held) == 1 and len(b.sweeper.held) == 1,
                   timeout=15, what="each replica holds one of the two shards")
        assert set(a.sweeper.held) | set(b.sweeper.held) == {0, 1}
        await poll(lambda: a.sweeper.shard_status()["liveness_shard_holders"] == {
            str(a.sweeper.held[0]): "ra", str(b.sweeper.held[0]): "rb"}, timeout=5,
            what="status names the holder of each shard")
        from herdbook.control.metrics import shard_families
        families = {f.name: f for f in shard_families(a.sweeper)}
        assert {(x.labels["shard"], x.labels["replica"]) for x in
                families["herd_liveness_shard_holder"].samples} == {
            (str(a.sweeper.held[0]), "ra"), (str(b.sweeper.held[0]), "rb")}
        assert families["herd_liveness_shards_held"].samples[0].value == 1
        # a node of each shard, heartbeating: b's is then killed with b
        on_a = next(n for n in (f"n{i}" for i in range(20)) if shard_of(n, 2) in a.sweeper.held)
        on_b = next(n for n in (f"n{i}" for i in range(20)) if shard_of(n, 2) in b.sweeper.held)
        live_on_b = next(n for n in (f"m{i}" for i in range(20))
                         if shard_of(n, 2) in b.sweeper.held)
        for node_id in (on_a, on_b, live_on_b):
            await ready_node(a, node_id)
        beating = {on_a, on_b, live_on_b}

        async def pump() -> None:     # the agents: a heartbeat every 0.2 s
            seq = 0
            while True:
                seq += 1
                for node_id in sorted(beating):
                    await beat(snc, node_id, seq)
                await asyncio.sleep(0.2)
        agents = asyncio.create_task(pump())
        try:
            await asyncio.sleep(1.0)
            assert on_b in b.sweeper.beats and on_b not in a.sweeper.beats
            # b is cut off (as if killed): its claim and leases expire, a takes its shard;
            # on_b dies with it, live_on_b goes on heartbeating through the handover
            held_b = b.sweeper.held
            beating.discard(on_b)
            await b.nc.close()
            loop = asyncio.get_running_loop()
            killed = loop.time()
            taken_at = None
            while loop.time() - killed < 8.0:
                if taken_at is None and set(held_b) <= set(a.sweeper.held):
                    taken_at = loop.time()
                if taken_at is not None and on_b in a.projector.nodes and \
                        a.projector.nodes[on_b].lifecycle.value == "DEGRADED":
                    break
                await asyncio.sleep(0.05)
            declared = loop.time()
            assert taken_at is not None, "a did not take b's shard"
            # not before a's watch (one heartbeat timeout from the takeover), and within
            # the lease TTL + timeout + watch + a few ticks of the kill
            assert declared - taken_at >= 1.0 - 0.1
            assert declared - killed <= 1.5 + 1.0 + 1.0 + 1.0
            await asyncio.sleep(1.1)     # live nodes go on beating past another timeout
            assert await events_of(snc, on_b, "degraded") == 1
            # no false alarm for the nodes heartbeating through it (checked while they
            # still heartbeat: they stop with this test)
            assert await events_of(snc, live_on_b, "degraded", settled=True) == 0
            assert await events_of(snc, on_a, "degraded", settled=True) == 0
        finally:
            agents.cancel()


@pytest.mark.timeout(60)
async def test_two_replicas_sweeping_one_node_declare_it_once(
        tmp_path: Path, sharded_server: EmbeddedNats, snc: Any) -> None:
    from tests.conftest import poll
    from tests.integration.conftest import running_plane
    async with running_plane(replica_yaml(tmp_path, "ra", sharded_server.url)) as a, \
            running_plane(replica_yaml(tmp_path, "rb", sharded_server.url)) as b:
        await poll(lambda: len(a.sweeper.held) == 1 and len(b.sweeper.held) == 1,
                   timeout=15, what="each replica holds one of the two shards")
        node_id = next(n for n in (f"n{i}" for i in range(20))
                       if shard_of(n, 2) in a.sweeper.held)
        # b sweeps a's shard too (a lease handover's overlap), both loops stopped so that
        # the two sweeps below decide from the same view version
        for plane in (a, b):
            task = plane.sweeper._task
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await b.sweeper.take(shard_of(node_id, 2))
        await ready_node(a, node_id)
        await poll(lambda: node_id in a.projector.nodes and node_id in b.projector.nodes,
                   timeout=5, what="both views know the node")
        version = a.projector.nodes[node_id].version
        await poll(lambda: b.projector.nodes[node_id].version == version, timeout=5)
        await asyncio.sleep(1.1)    # silent for a timeout, on both (and past b's watch)
        a.sweeper.sweep()
        b.sweeper.sweep()
        assert node_id in a.sweeper.declarations.inflight
        assert node_id in b.sweeper.declarations.inflight   # both decided to declare
        await poll(lambda: not a.sweeper.declarations._tasks
                   and not b.sweeper.declarations._tasks, timeout=10)
        assert await events_of(snc, node_id, "degraded") == 1


async def test_an_agents_fence_finds_its_nodes_heartbeat_in_its_shard(snc: Any) -> None:
    from herdbook.agent.fence import Fence
    from herdbook.config import parse_config
    from herdbook.control.settings import LivenessPublisher
    from herdbook.events.heartbeat import AgentId
    await LivenessPublisher(snc, parse_config(
        f"lifecycle: {{liveness_shards: {SHARDS}}}")).publish()
    await beat(snc, "x", 7)      # stored as herd.hb.<shard>.x
    me = AgentId(host="h", pid=1)
    fence = Fence(snc, "x", me, own_boots=(), timeout=lambda: 1.0)
    last = await fence.last_heartbeat()
    assert last is not None and last.boot_id == "b1"


class SlowSweeper:
    """Takes a shard as slowly as reading 100k stored heartbeats on a busy machine."""

    def __init__(self) -> None:
        self.held: set[int] = set()
        self.shard_holders: Any = dict

    async def take(self, shard: int) -> None:
        await asyncio.sleep(1.5)
        self.held.add(shard)

    async def release(self, shard: int) -> None:
        self.held.discard(shard)


async def test_a_slow_shard_start_does_not_let_the_other_leases_lapse(nc: Any) -> None:
    from herdbook.control.shards import ShardLeases
    sweeper = SlowSweeper()
    leases = ShardLeases(nc, "ra", sweeper, shards=2, ttl=1.0)
    await leases.start()
    try:
        await asyncio.sleep(2.5)     # both starts done; every lease renewed throughout
        assert sweeper.held == {0, 1}
        assert sorted(leases.revisions) == [0, 1]
        kv = await nc.jetstream().key_value("herd_leases")
        assert {(await kv.get(f"sweeper-{k}")).value for k in (0, 1)} == {b"ra"}
    finally:
        await leases.stop()
