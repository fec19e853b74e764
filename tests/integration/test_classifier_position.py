"""The classifier's position against a real nats-server: it is read back from the health
changes in HERD_EVENTS (each carries its report's HERD_HEALTH sequence), so a restart
resumes after the last decided report and decides nothing twice."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.events.codec import encode
from herdbook.events.health_report import HealthReport, NodeHealthChanged
from herdbook.events.node import NodeApproved, NodeBootChecked, NodeRegistered
from herdbook.events.states import Health
from herdbook.events.store import EventStore
from herdbook.events.subjects import HEALTH_STREAM
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.reactors.classifier import decided_reports


async def ready(store: EventStore, *node_ids: str) -> None:
    for node_id in node_ids:
        await store.append(NodeRegistered(node_id=node_id, boot_id="b1"))
        await store.append(NodeApproved(node_id=node_id))
        await store.append(NodeBootChecked(node_id=node_id, boot_id="b1", passed=True))


async def test_each_nodes_last_health_change_names_its_report(nc: Any) -> None:
    store = EventStore(nc)
    await ready(store, "n1", "n2", "n3")
    for node_id, seq, health in (("n1", 3, Health.HEALTHY), ("n2", 5, Health.HEALTHY),
                                 ("n1", 7, Health.DEGRADED)):
        await store.append(NodeHealthChanged(node_id=node_id, health=health, report_seq=seq))
    await store.append(NodeHealthChanged(node_id="n3", health=Health.HEALTHY))  # no report
    assert await decided_reports(nc) == {"n1": 7, "n2": 5}


async def test_a_restart_resumes_after_the_last_decided_report(
        nc: Any, nats_server: EmbeddedNats, tmp_path: Path) -> None:
    store = EventStore(nc)
    await ready(store, "n1")
    js = nc.jetstream()
    config = parse_config(f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path / 'd'}'\n"
                          "node_id: cp\n")

    async def report(report_id: str) -> int:
        body = HealthReport(report_id=report_id, node_id="n1", boot_id="b1")
        return (await js.publish("herd.health.n1", encode(body), stream=HEALTH_STREAM)).seq

    async def health_changes(count: int) -> list[NodeHealthChanged]:
        deadline = time.monotonic() + 15.0
        while True:
            events = [e for _, e in await store.load("node", "n1")
                      if isinstance(e, NodeHealthChanged)]
            if len(events) >= count or time.monotonic() > deadline:
                return events
            await asyncio.sleep(0.05)

    # given a control plane that classified a healthy report
    seq = await report("r1")
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        [changed] = await health_changes(1)
        assert (changed.health, changed.report_seq) == (Health.HEALTHY, seq)
    finally:
        await plane.stop()
    # when it starts again, then it resumes after that report and decides nothing twice
    plane = bootstrap(config, clock=SYSTEM_CLOCK)
    await plane.start()
    try:
        assert plane.classifier._position == seq
        later = await report("r2")
        await asyncio.sleep(0.5)
        assert plane.classifier._position == later
        assert len(await health_changes(2)) == 1
    finally:
        await plane.stop()
