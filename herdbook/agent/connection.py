"""NATS client callbacks for long-lived processes: one log line per event, no tracebacks."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("herdbook.nats")


async def quiet_errors(err: Exception) -> None:
    log.warning("NATS: %s", str(err) or type(err).__name__)


def connection_callbacks() -> dict[str, Any]:
    async def disconnected() -> None:
        log.warning("NATS disconnected; reconnecting")

    async def reconnected() -> None:
        log.info("NATS reconnected")

    return {"disconnected_cb": disconnected, "reconnected_cb": reconnected}
