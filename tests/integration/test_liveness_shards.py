"""Liveness shards on a real nats-server (DESIGN §10, docs/scale.md): the server's
subject mapping and ``shard_of`` agree; a replica refuses shards the server does not
make; the stream stores, and the authority binds, the mapped heartbeat subjects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from herdbook.control.nats_parts import ensure_streams
from herdbook.events.authority import bind_node_report
from herdbook.events.hb_shards import shard_of
from herdbook.natsd.server import EmbeddedNats
from herdbook.reactors.heartbeat_intake import MappingMissing, check_mapping
from tests.conftest import free_port

SHARDS = 4


@pytest.fixture
def sharded_server(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats", port=free_port(), liveness_shards=SHARDS)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def snc(sharded_server: EmbeddedNats) -> AsyncIterator[Any]:
    client = await nats.connect(sharded_server.url)
    await ensure_streams(client, 1, 3600.0)
    try:
        yield client
    finally:
        await client.close()


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
