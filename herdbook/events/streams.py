"""The three stream configurations of DESIGN §3, in one place."""

from __future__ import annotations

from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from herdbook.events.subjects import EVENTS_STREAM, HEALTH_STREAM, HEARTBEATS_STREAM

DAY = 24 * 3600.0
MAX_CONSUMERS = 1_000_000
"""nats-server 2.15 caps a stream at 1000 consumers unless the stream sets a limit (-1 no
longer means unlimited). Agents hold none (they catch up through the control plane), but
operators' tails and external readers each take one: an explicit, large limit."""


def events_stream(replicas: int = 1) -> StreamConfig:
    return StreamConfig(
        name=EVENTS_STREAM,
        subjects=["herd.node.>", "herd.instance.>", "herd.job.>", "herd.eval.>", "herd.alloc.>",
                  "herd.pool.>", "herd.breaker.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        deny_delete=True,
        deny_purge=True,
        duplicate_window=120.0,
        allow_atomic=True,
        allow_direct=True,   # an agent reads its node's last event by subject (chaining)
        num_replicas=replicas,
        max_consumers=MAX_CONSUMERS,
    )


def heartbeats_stream(replicas: int = 1, max_age_s: float = DAY) -> StreamConfig:
    """The latest heartbeat of each node. ``max_age_s`` (``lifecycle.heartbeats_max_age``)
    lets the subjects of nodes that stopped heartbeating (dead, deleted, made up) expire,
    so they neither pile up nor are read again at every start; it must stay well above
    every heartbeat timeout + grace period, which ``config`` checks."""
    # herd.res.<id> (latest resource report), herd.gpu.<id> (latest per-GPU telemetry,
    # docs/gpus.md "Where telemetry flows") and the clock probe share the
    # last-value-per-subject semantics of heartbeats.
    return StreamConfig(
        name=HEARTBEATS_STREAM,
        subjects=["herd.hb.*", "herd.hb.*.*", "herd.res.*", "herd.gpu.*",
                  "herd.clock.probe"],   # herd.hb.<shard>.<node>: events.hb_shards
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.OLD,
        allow_direct=True,
        max_age=max_age_s,
        duplicate_window=min(10.0, max_age_s),   # the server refuses a longer one
        num_replicas=replicas,
        max_consumers=MAX_CONSUMERS,
    )


def health_stream(replicas: int = 1, max_age_s: float = 7 * DAY) -> StreamConfig:
    return StreamConfig(
        name=HEALTH_STREAM,
        subjects=["herd.health.*"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=max_age_s,
        max_msgs_per_subject=1000,
        num_replicas=replicas,
        max_consumers=MAX_CONSUMERS,
    )


def all_streams(replicas: int = 1, health_max_age_s: float = 7 * DAY,
                heartbeats_max_age_s: float = DAY) -> list[StreamConfig]:
    return [events_stream(replicas), heartbeats_stream(replicas, heartbeats_max_age_s),
            health_stream(replicas, health_max_age_s)]
