"""The control plane's ports (cosmicpython's ``bootstrap(uow=…, publish=…)``): how it
reaches NATS, where its events are stored, and what creates instances. ``build_plane``
(``bootstrap.py``) requires them; ``bootstrap``, the entry point of `herd up`, `herd sim`,
the tests and the benchmarks, passes ``REAL_PORTS`` unless it is given others, so a test
builds a whole plane around a recording store or fake providers in one call.

What is not a port: the parts themselves (the projector, the reactors, the API), which
are the plane; and the clock, which ``bootstrap`` already takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from nats.aio.client import Client as NATS

from herdbook.config import Config
from herdbook.control.providers import FakeProvider, LocalProvider, Provider
from herdbook.credentials import CredsFile, NatsAuth, write_creds
from herdbook.events.store import EventStore
from herdbook.natsd.embedded import EmbeddedNats
from herdbook.natsd.users import UserRegistry

StorageFull = Callable[[], str | None]
"""The disk watch's verdict: why the store's disk is full, or None (``events/store.py``)."""


@dataclass(frozen=True)
class ProviderSite:
    """What a provider may need of the plane it serves."""

    nc: NATS
    """The plane's client (connected once the plane starts): in-process agents share it."""
    data_dir: Path
    url: str
    """Where an agent the provider starts connects."""
    agent_args: Callable[[str, Path], list[str]]
    """(node id, state dir) -> more `herd agent` options: credentials, TLS."""


@dataclass(frozen=True)
class Ports:
    connection: Callable[[], NATS]
    """A client, not yet connected: the plane's "nats connection" part connects it (to
    ``nats.url`` or the embedded server) and makes the streams; every part shares it."""
    store: Callable[[NATS, StorageFull | None], EventStore]
    """The event store over that client (with the embedded server's disk watch, if any):
    the one runner, the sweeper, the breaker and the API append through it."""
    providers: Callable[[ProviderSite], dict[str, Provider]]
    """The providers by the name a pool's ``provider`` gives (the instance manager's)."""


def event_store(nc: NATS, storage_full: StorageFull | None) -> EventStore:
    return EventStore(nc, storage_full=storage_full)


def real_providers(site: ProviderSite) -> dict[str, Provider]:
    return {"local": LocalProvider(site.data_dir, site.url, site.agent_args),
            "fake": FakeProvider(site.nc, site.data_dir)}


REAL_PORTS = Ports(connection=NATS, store=event_store, providers=real_providers)


@runtime_checkable
class StopsAll(Protocol):
    """A provider whose instances end with the plane (the fake one's in-process agents);
    the local provider's agents outlive it, as cloud instances do."""

    async def stop_all(self) -> None: ...


async def stop_providers(providers: dict[str, Provider]) -> None:
    for provider in providers.values():
        if isinstance(provider, StopsAll):
            await provider.stop_all()


def connection_auth(auth: NatsAuth, users: UserRegistry | None) -> Callable[[], NatsAuth]:
    """The control plane's own credentials: with ``nats.auth``, its user on the embedded
    server (created by the server's start); else what the config gives."""
    if users is None:
        return lambda: auth

    def control_user() -> NatsAuth:
        control = users.ensure_control()
        return NatsAuth(user=control.user, password=control.password)
    return control_user


def local_agent_args(cfg: Config, url: str, users: UserRegistry | None,
                     embedded: EmbeddedNats | None) -> Callable[[str, Path], list[str]]:
    """How an agent the local provider starts connects: its own credentials, issued
    here, on an auth-enabled embedded server; the control plane's TLS options."""
    def agent_args(node_id: str, state_dir: Path) -> list[str]:
        args: list[str] = []
        if users is not None:
            user = users.add_agent(node_id)
            users.reload_server()
            path = state_dir / "agent.creds"
            write_creds(path, CredsFile(user=user.user, password=user.password, url=url,
                                        kind=user.kind, node_id=node_id))
            args += ["--creds", str(path)]
        tls = cfg.nats.tls
        for flag, value in (("--tls-ca", tls.ca), ("--tls-cert", tls.cert),
                            ("--tls-key", tls.key)):
            if value and embedded is None:
                args += [flag, value]
        return args
    return agent_args
