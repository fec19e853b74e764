"""What every NATS client of herdbook shares, whichever process it runs in (the CLI,
the agent, the control plane): the server list of a ``--server`` / ``nats.url`` value,
and callbacks that say a connection's troubles in one log line, never a traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("herdbook.nats")


def server_list(url: str) -> list[str]:
    """``nats://a:4222,nats://b:4222`` -> the servers of a cluster, as nats-py takes them
    (it would read the whole string as one URL)."""
    return [part.strip() for part in url.split(",") if part.strip()]


async def quiet_errors(err: Exception) -> None:
    log.warning("NATS: %s", str(err) or type(err).__name__)


def connection_callbacks(on_reconnect: Callable[[], Any] | None = None) -> dict[str, Any]:
    async def disconnected() -> None:
        # Also the last word of every clean close: info. A server that stays away is
        # told by error_cb (quiet_errors), at warning level.
        log.info("NATS disconnected; reconnecting")

    async def reconnected() -> None:
        log.info("NATS reconnected")
        if on_reconnect is not None:
            on_reconnect()

    return {"disconnected_cb": disconnected, "reconnected_cb": reconnected}
