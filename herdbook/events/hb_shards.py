"""Liveness shards: which of S shards a node's heartbeats fall in (DESIGN §10).

With ``lifecycle.liveness_shards`` S > 1 the NATS server maps every heartbeat subject
``herd.hb.<node>`` onto ``herd.hb.<shard>.<node>`` (a subject mapping with nats-server's
``partition(S, 1)``: FNV-1a 32 of the node id, modulo S), so the agent publishes as it
always did and each control-plane replica subscribes to the shards it holds only. The
sweeper needs the same function to know which nodes it is to arm without a heartbeat
(registered, never heard from): ``shard_of`` is that function, and a test checks it
against the real server. With S = 1 there is no mapping: ``herd.hb.<node>`` as before.
"""

from __future__ import annotations

MAX_SHARDS = 1024

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a32(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def shard_of(node_id: str, shards: int) -> int:
    """The shard nats-server's ``partition(shards, 1)`` puts ``herd.hb.<node_id>`` in."""
    if shards <= 1:
        return 0
    return fnv1a32(node_id.encode()) % shards


def heartbeat_filter(shard: int, shards: int) -> str:
    """The subjects of one shard's heartbeats, as they reach subscribers and the stream."""
    return "herd.hb.*" if shards <= 1 else f"herd.hb.{shard}.*"


def nats_mapping(shards: int) -> dict[str, str]:
    """The account mapping that partitions the heartbeats (empty for one shard), in
    nats-server's config syntax."""
    if shards <= 1:
        return {}
    return {"herd.hb.*": f"herd.hb.{{{{partition({shards},1)}}}}.{{{{wildcard(1)}}}}"}


def mapping_conf(shards: int) -> list[str]:
    """``nats_mapping`` as nats-server config lines (none for one shard)."""
    return ["mappings = {", *(f'  "{src}": "{dst}"' for src, dst in
                              nats_mapping(shards).items()), "}"] if shards > 1 else []


def stored_heartbeat_subject(node_id: str, shards: int) -> str:
    """Where HERD_HEARTBEATS keeps the node's last heartbeat."""
    return f"herd.hb.{node_id}" if shards <= 1 else f"herd.hb.{shard_of(node_id, shards)}.{node_id}"


def shard_in_subject(subject: str) -> int | None:
    """``herd.hb.<shard>.<node>`` -> shard; None for ``herd.hb.<node>`` (unmapped)."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[2].isdigit() and parts[2].isascii():
        return int(parts[2])
    return None
