"""Two agents heartbeating for one node id, as the control plane sees them (issue 26 item
1): what is left when the fence could not keep the second out (an agent older than the
fence, or one cut off longer than the timeout and replaced). `herd node describe` names
both processes, /metrics counts the node, one WARNING says it, and it ends when one stops.
A real nats-server and control plane; the two agents are the test's own publishers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.codec import encode
from herdbook.events.heartbeat import AgentId, Heartbeat
from herdbook.events.node import NodeBootChecked, NodeBootStarted, NodeRegistered
from herdbook.events.store import EventStore
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import free_port, herd
from tests.integration.test_metrics import http_get

OLD = AgentId(host="rack1-07", pid=4242, since=1_764_000_000.0)
NEW = AgentId(host="rack9-01", pid=7, since=1_764_000_100.0)


async def describe(url: str) -> dict[str, Any]:
    out = await asyncio.to_thread(herd, "node", "describe", "gpu-2", "-o", "json", server=url,
                                  check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


async def test_two_live_agents_are_named_counted_and_logged(
        nats_server: EmbeddedNats, nc: Any, tmp_path: Path, caplog: Any) -> None:
    port = free_port()
    plane = bootstrap(parse_config(
        f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\nnode_id: cp\n"
        f"lifecycle: {{heartbeat_timeout: 2s}}\nmetrics: {{port: {port}}}\n"), clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        store = EventStore(nc)
        await store.append(NodeRegistered(node_id="gpu-2", boot_id="b1", agent=OLD))
        await store.append(NodeBootChecked(node_id="gpu-2", boot_id="b1", passed=True))
        seqs = {"b1": 0, "b2": 0}

        async def beat(boot: str, agent: AgentId) -> None:
            seqs[boot] += 1
            await nc.publish("herd.hb.gpu-2", encode(Heartbeat(
                node_id="gpu-2", boot_id=boot, seq=seqs[boot], agent=agent)))

        for _ in range(5):
            await beat("b1", OLD)
            await asyncio.sleep(0.1)
        assert (await describe(nats_server.url))["agent_conflict"] is None

        # A second agent without the fence announces itself, and both go on.
        await store.append(NodeBootStarted(node_id="gpu-2", boot_id="b2", agent=NEW))
        for _ in range(15):
            await beat("b1", OLD)
            await beat("b2", NEW)
            await asyncio.sleep(0.1)
        node = await describe(nats_server.url)
        assert "host rack9-01, pid 7" in node["agent"]
        conflict = node["agent_conflict"]
        assert "host rack1-07, pid 4242" in conflict and "host rack9-01, pid 7" in conflict
        _, _, text = await http_get(port, "/metrics")
        assert "herd_agent_conflicts 1.0" in text
        assert 'herd_node_agent_conflict{node="gpu-2"} 1.0' in text
        assert [r for r in caplog.records if "two agents heartbeat for this node" in
                r.getMessage() and r.levelname == "WARNING"]

        # The old one stops: over after one heartbeat timeout.
        for _ in range(25):
            await beat("b2", NEW)
            await asyncio.sleep(0.1)
        assert (await describe(nats_server.url))["agent_conflict"] is None
        _, _, text = await http_get(port, "/metrics")
        assert "herd_agent_conflicts 0.0" in text
    finally:
        await plane.stop()
