"""The ports ``bootstrap`` is given are the ones a started plane uses: against a real
nats-server (the client is never faked), a plane built with a recording event store and
a recording provider appends its own node's registration through that store, and its
leader's instance manager fills a pool through that provider."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from herdbook.clock import SYSTEM_CLOCK
from herdbook.config import parse_config
from herdbook.control.bootstrap import bootstrap
from herdbook.control.ports import REAL_PORTS, ProviderSite, StorageFull
from herdbook.control.providers import InstanceSpec, Provider
from herdbook.events.base import Event
from herdbook.events.store import EventStore
from herdbook.natsd.embedded import EmbeddedNats
from tests.conftest import poll


class RecordingStore(EventStore):
    """The real store, remembering the name of every event appended through it."""

    def __init__(self, nc: NATS, storage_full: StorageFull | None) -> None:
        super().__init__(nc, storage_full=storage_full)
        self.names: list[str] = []

    async def append_decided(self, events: Any, expected_version: int) -> int:
        self.names += [e.event_name for e in events]
        return await super().append_decided(events, expected_version)

    async def append(self, event: Event, expected_version: int | None = None) -> int:
        self.names.append(event.event_name)
        return await super().append(event, expected_version)


class RecordingProvider:
    """Says it made each instance; makes nothing."""

    name = "fake"

    def __init__(self) -> None:
        self.made: list[InstanceSpec] = []

    async def provision(self, spec: InstanceSpec) -> str:
        self.made.append(spec)
        return f"recorded:{spec.instance_id}"

    async def terminate(self, instance_id: str, provider_ref: str) -> None:
        return None

    async def list(self) -> list[str]:
        return [spec.instance_id for spec in self.made]


async def test_a_started_plane_appends_and_provisions_through_the_ports_it_was_given(
        nats_server: EmbeddedNats, tmp_path: Path) -> None:
    stores: list[RecordingStore] = []
    provider = RecordingProvider()

    def store(nc: Any, storage_full: StorageFull | None) -> EventStore:
        stores.append(RecordingStore(nc, storage_full))
        return stores[-1]

    def providers(site: ProviderSite) -> dict[str, Provider]:
        return {"fake": provider}

    ports = replace(REAL_PORTS, store=store, providers=providers)
    plane = bootstrap(parse_config(
        f"nats: {{url: '{nats_server.url}'}}\ndata_dir: '{tmp_path}'\nnode_id: cp-ports\n"
        "pools: {gpu: {provider: fake, min_nodes: 1, max_nodes: 1}}\n".encode()),
        clock=SYSTEM_CLOCK, ports=ports)
    await plane.start()
    try:
        [recording] = stores
        assert plane.store is recording and plane.runner.store is recording
        await poll(lambda: provider.made, timeout=15, what="the pool's instance provisioned")
        assert [spec.pool for spec in provider.made] == ["gpu"]
        await poll(lambda: {"registered", "provisioned"} <= set(recording.names), timeout=15,
                   what="the registration and the instance's events through the given store")
    finally:
        await plane.stop()
