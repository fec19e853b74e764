"""What the node says about itself: node info (persisted) and resources (transient)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import socket
import time

import msgspec

import herdbook
from herdbook.events.heartbeat import NodeResources
from herdbook.events.node import GpuInfo, NodeInfo
from herdbook.events.states import NodeClass


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def node_info(labels: dict[str, str], node_class: NodeClass, gpus: tuple[GpuInfo, ...],
              instance_id: str | None) -> NodeInfo:
    return NodeInfo(
        hostname=socket.gethostname(), arch=platform.machine(), os=platform.system().lower(),
        cpus=os.cpu_count() or 0, memory_bytes=_meminfo().get("MemTotal", 0), gpus=gpus,
        labels=dict(labels), node_class=node_class, agent_version=herdbook.__version__,
        instance_id=instance_id,
    )


def info_hash(info: NodeInfo) -> str:
    return hashlib.sha256(msgspec.json.encode(info)).hexdigest()


def resources(node_id: str, state_dir: str, gpus_total: int) -> NodeResources:
    mem = _meminfo()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return NodeResources(
        node_id=node_id, cpus=os.cpu_count() or 0, load_1m=round(load, 2),
        memory_total_bytes=mem.get("MemTotal", 0),
        memory_available_bytes=mem.get("MemAvailable", 0),
        disk_free_bytes=shutil.disk_usage(state_dir).free, gpus_total=gpus_total,
        gpus_free=gpus_total, sent_at=time.time(),
    )
