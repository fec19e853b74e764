"""The agent's way through outages: connect until a server answers, append until the
event is stored (the callbacks and the server list are ``herdbook.nats_connection``'s)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client as NATS

from herdbook.credentials import NatsAuth, redact
from herdbook.events.base import Event
from herdbook.events.store import ConflictError, EventStore
from herdbook.nats_connection import connection_callbacks, quiet_errors, server_list

log = logging.getLogger("herdbook.nats")


async def connect_until_reached(server: str, auth: NatsAuth | None, name: str,
                                stop: asyncio.Event,
                                on_reconnect: Callable[[], Any] | None = None) -> NATS:
    """Connect, retrying with back-off until a server answers or ``stop`` is set (then
    ``CancelledError``); the client reconnects by itself from then on."""
    _, options = (auth or NatsAuth()).resolve(server)
    delay = 0.5
    while not stop.is_set():
        try:
            return await nats.connect(
                server_list(server), name=name,
                max_reconnect_attempts=-1, reconnect_time_wait=1, connect_timeout=3,
                allow_reconnect=True, error_cb=quiet_errors,
                **connection_callbacks(on_reconnect=on_reconnect),
                **options)
        except Exception as err:  # noqa: BLE001 - the server may come later
            log.warning("cannot reach NATS at %s (%s); retrying in %.0fs",
                        redact(server), err, delay)
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, 10.0)
    raise asyncio.CancelledError


async def append_until_stored(store: EventStore, event: Event, stop: asyncio.Event,
                              expected_version: int | None = None) -> None:
    """Append until it lands; the event id makes a retry a no-op for the server. Once
    ``stop`` is set a failure is raised instead. With ``expected_version``, another
    writer first is a ``ConflictError`` for the caller."""
    delay = 0.5
    while True:
        try:
            await store.append(event, expected_version)
            return
        except ConflictError:
            if expected_version is not None:
                raise
            await asyncio.sleep(delay)
        except Exception as err:  # noqa: BLE001 - keep trying through outages
            if stop.is_set():
                raise
            log.warning("%s not stored yet (%s); retrying", event.event_name, err)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
