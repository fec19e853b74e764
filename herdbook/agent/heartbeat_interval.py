"""How often this agent heartbeats: the interval it was given, or a third of the heartbeat
timeout the control plane published for this node's class (``events.liveness``); 10s
while none is published. An interval that cannot keep the node READY is warned about in
one line, once per settings that make it so."""

from __future__ import annotations

import asyncio
import logging

import msgspec
from nats.aio.client import Client as NATS

from herdbook.durations import format_duration
from herdbook.events.liveness_settings import (
    FALLBACK_INTERVAL,
    LIVENESS_SUBJECT,
    SETTINGS_STREAM,
    LivenessSettings,
    derived_interval,
    interval_warning,
    liveness_decoder,
)

log = logging.getLogger(__name__)

READ_TIMEOUT = 2.0
REREAD_INTERVAL = 60.0
"""The settings are read again this often (a control plane restarted with another config)."""
RETRY_INTERVAL = 5.0
"""... and this often while none were read."""


async def read_settings(nc: NATS, timeout: float = READ_TIMEOUT) -> LivenessSettings | None:
    """The published settings; None when there are none (no control plane has started,
    or one too old to publish them) or they cannot be read now."""
    try:
        msg = await asyncio.wait_for(nc.jetstream().get_last_msg(
            SETTINGS_STREAM, LIVENESS_SUBJECT, direct=True), timeout)
        return liveness_decoder.decode(msg.data or b"")
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        log.debug("liveness settings do not decode: %s", err)
    except Exception as err:  # noqa: BLE001 - not published (yet), or NATS away
        log.debug("no liveness settings: %r", err)
    return None


class HeartbeatPace:
    def __init__(self, node_id: str, node_class: str, explicit: float | None) -> None:
        self.node_id = node_id
        self.node_class = node_class
        self.explicit = explicit
        self.interval = explicit if explicit is not None else FALLBACK_INTERVAL
        self.settings: LivenessSettings | None = None
        self.warning: str | None = None
        self._warned: set[str] = set()

    def apply(self, settings: LivenessSettings) -> None:
        """Derive the interval from ``settings`` (unless one was given) and warn once if
        it cannot keep the node READY."""
        self.settings = settings
        timeout = settings.timeout(self.node_class)
        if timeout is None or timeout <= 0:
            return
        if self.explicit is None:
            interval = derived_interval(timeout)
            if interval != self.interval:
                log.info("%s: heartbeating every %s (a third of the heartbeat timeout %s)",
                         self.node_id, format_duration(interval), format_duration(timeout))
            self.interval = interval
        self.warning = interval_warning(self.interval, timeout)
        if self.warning is not None and self.warning not in self._warned:
            self._warned.add(self.warning)
            log.warning("%s: %s", self.node_id, self.warning)

    async def refresh(self, nc: NATS) -> bool:
        """Read the settings; apply them when they changed. Whether any were read."""
        settings = await read_settings(nc)
        if settings is None:
            return False
        if settings != self.settings:
            self.apply(settings)
        return True

    async def follow(self, nc: NATS) -> None:
        """Read the settings again now and then, sooner while none were read."""
        found = self.settings is not None
        while True:
            await asyncio.sleep(REREAD_INTERVAL if found else RETRY_INTERVAL)
            found = await self.refresh(nc)
