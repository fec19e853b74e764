"""``bootstrap`` takes its ports (``control/ports.py``): given a NATS client factory, an
event store and providers, when a whole plane is built in one call, then every part that
appends holds that store, the instance manager those providers, and every part that
talks to NATS that client. Built, not started: building does no I/O (the parts'
``start`` connects), so this needs no server and no mocked client (the client is a real,
unconnected nats-py one)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from herdbook.config import parse_config
from herdbook.control import bootstrap as bootstrap_module
from herdbook.control.bootstrap import bootstrap, build_plane
from herdbook.control.parts import PerTerm
from herdbook.control.ports import REAL_PORTS, Ports, ProviderSite
from herdbook.control.providers import FakeProvider, InstanceSpec, LocalProvider
from tests.fakes import FakeClock, FakeProjector, FakeStore


class NoProvider:
    """A provider that creates nothing and says so."""

    name = "none"

    def __init__(self) -> None:
        self.provisioned: list[str] = []

    async def provision(self, spec: InstanceSpec) -> str:
        self.provisioned.append(spec.instance_id)
        return f"none:{spec.instance_id}"

    async def terminate(self, instance_id: str, provider_ref: str) -> None:
        return None

    async def list(self) -> list[str]:
        return []


class Recorder:
    """The ports, recording what the plane asked of them."""

    def __init__(self) -> None:
        self.clients: list[NATS] = []
        self.store = FakeStore(FakeProjector())
        self.sites: list[ProviderSite] = []
        self.providers = {"none": NoProvider()}

    def connection(self) -> NATS:
        self.clients.append(NATS())
        return self.clients[-1]

    def make_store(self, nc: NATS, storage_full: Any) -> Any:
        assert nc is self.clients[-1]
        return self.store

    def make_providers(self, site: ProviderSite) -> Any:
        self.sites.append(site)
        return self.providers

    def ports(self) -> Ports:
        return Ports(connection=self.connection, store=self.make_store,
                     providers=self.make_providers)


def config(tmp_path: Path) -> Any:
    return parse_config(f"nats: {{url: 'nats://127.0.0.1:1'}}\ndata_dir: '{tmp_path}'\n"
                        "node_id: cp-ports\n".encode())


def test_a_whole_plane_is_built_around_the_ports_it_is_given(tmp_path: Path) -> None:
    ports = Recorder()
    plane = bootstrap(config(tmp_path), clock=FakeClock(), ports=ports.ports())
    [nc] = ports.clients
    assert plane.nc is nc and plane.projector.nc is nc and plane.api.nc is nc
    assert plane.store is ports.store
    assert plane.runner.store is ports.store and plane.api.store is ports.store
    [site] = ports.sites
    assert (site.nc, site.url, site.data_dir) == (nc, "nats://127.0.0.1:1", tmp_path)
    assert plane.providers is ports.providers
    [manager] = [p for p in plane.parts.parts
                 if isinstance(p, PerTerm) and p.name == "instance manager"]
    assert manager.build().providers is ports.providers


def test_the_entry_point_defaults_to_the_real_ports_and_the_builder_requires_them(
        tmp_path: Path) -> None:
    plane = bootstrap(config(tmp_path), clock=FakeClock())
    assert type(plane.nc) is NATS and type(plane.store).__name__ == "EventStore"
    assert {name: type(p) for name, p in plane.providers.items()} == {
        "local": LocalProvider, "fake": FakeProvider}
    assert inspect.signature(bootstrap).parameters["ports"].default is REAL_PORTS
    assert inspect.signature(build_plane).parameters["ports"].default is inspect.Parameter.empty


def test_nothing_in_the_builder_makes_a_port_itself() -> None:
    """The client, the store and the providers come only from ``ports``: the composition
    root names none of their classes (a second, real one cannot slip in beside a fake)."""
    source = inspect.getsource(bootstrap_module)
    for made in ("NATS(", "EventStore(", "LocalProvider(", "FakeProvider("):
        assert made not in source, made
