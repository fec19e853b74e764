"""The agent's way through outages: connect until a server answers, append until the
event is stored (the callbacks and the server list are ``herdbook.nats_connection``'s)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import nats
from nats.aio.client import Client as NATS

from herdbook.backoff import Backoff
from herdbook.credentials import CredentialsError, NatsAuth, redact, url_user
from herdbook.events.base import Event
from herdbook.events.store import ConflictError, EventStore
from herdbook.nats_connection import connection_callbacks, quiet_errors, server_list

log = logging.getLogger("herdbook.nats")

AGENT_NAME = "herd-agent:"
"""How an agent names its connection: ``herd-agent:<node id>`` (``agent.main``)."""
CONNECT_RETRY = Backoff(0.5, cap=10.0)
"""Reaching NATS at start: 0.5 s, 1, 2 ... 10 s (the client reconnects by itself after)."""
APPEND_RETRY = Backoff(0.5, cap=10.0)
"""An append through an outage: 0.5 s, 1, 2 ... 10 s."""


def creds_of_another_node(user: str | None, node_id: str) -> str | None:
    """Why an agent for ``node_id`` cannot work as NATS user ``user`` (an agent user of
    another node: every publish on its own node's subjects would be a permission
    violation, retried for ever), or None. Operator and custom users are not judged."""
    if not user or not user.startswith("agent-") or user == f"agent-{node_id}":
        return None
    owner = user.removeprefix("agent-")
    return (f"these credentials (user {user}) are node {owner}'s, not node {node_id}'s: "
            f"issue this node its own where herd up runs (herd creds agent {node_id}), "
            f"or start the agent with --node-id {owner}")


async def connect_until_reached(server: str, auth: NatsAuth | None, name: str,
                                stop: asyncio.Event,
                                on_reconnect: Callable[[], Any] | None = None) -> NATS:
    """Connect, retrying with back-off until a server answers or ``stop`` is set (then
    ``CancelledError``); the client reconnects by itself from then on. Credentials of
    another node's agent are a ``CredentialsError`` at once (``creds_of_another_node``)."""
    _, options = (auth or NatsAuth()).resolve(server)
    if name.startswith(AGENT_NAME):
        wrong = creds_of_another_node(options.get("user") or url_user(server),
                                      name.removeprefix(AGENT_NAME))
        if wrong is not None:
            raise CredentialsError(wrong)
    delays = CONNECT_RETRY.delays()
    while not stop.is_set():
        delay = next(delays)
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
    raise asyncio.CancelledError


async def append_until_stored(store: EventStore, event: Event, stop: asyncio.Event,
                              expected_version: int | None = None) -> None:
    """Append until it lands; the event id makes a retry a no-op for the server. Once
    ``stop`` is set a failure is raised instead. With ``expected_version``, another
    writer first is a ``ConflictError`` for the caller."""
    delays = APPEND_RETRY.delays()
    delay = next(delays)
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
            delay = next(delays)
