"""Publishes the control plane's liveness settings (``events/liveness_settings.py``) where agents
read them: the key ``liveness`` of the KV bucket ``herd_settings``, written at start by
every replica (they run one config; the last one started wins when they do not)."""

from __future__ import annotations

import logging

import msgspec
from nats.aio.client import Client as NATS
from nats.js.api import KeyValueConfig, StorageType

from herdbook.config import Config, grace_period, heartbeat_timeout
from herdbook.events.liveness_settings import LIVENESS_KEY, SETTINGS_BUCKET, LivenessSettings
from herdbook.events.states import NodeClass

log = logging.getLogger(__name__)


def liveness_settings(config: Config) -> LivenessSettings:
    return LivenessSettings(
        heartbeat_timeout={cls: heartbeat_timeout(config, cls) for cls in NodeClass},
        grace_period={cls: grace_period(config, cls) for cls in NodeClass},
        boot_timeout=float(config.lifecycle.boot_timeout),
        liveness_shards=config.lifecycle.liveness_shards)


class LivenessPublisher:
    def __init__(self, nc: NATS, config: Config) -> None:
        self.nc = nc
        self.settings = liveness_settings(config)
        self.replicas = config.nats.replicas

    async def start(self) -> None:
        """Write the settings; a failure is logged (agents then heartbeat every 10s,
        their fallback) and does not stop the control plane."""
        try:
            await self.publish()
        except Exception as err:  # noqa: BLE001 - agents fall back to their default
            log.warning("cannot publish the liveness settings for agents: %s", err)

    async def publish(self) -> None:
        """Write the settings, the bucket created if missing: at start, and when it was
        deleted from outside (the streams guard calls this then)."""
        js = self.nc.jetstream()
        try:
            kv = await js.key_value(SETTINGS_BUCKET)
        except Exception:  # noqa: BLE001 - not there yet: create it
            kv = await js.create_key_value(KeyValueConfig(
                bucket=SETTINGS_BUCKET, history=1, storage=StorageType.FILE,
                replicas=self.replicas, direct=True))
        await kv.put(LIVENESS_KEY, msgspec.json.encode(self.settings))
