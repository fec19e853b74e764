"""What a fake node's allocations see of its GPUs (``--fake-gpus``): the fake NVML backend
read as one telemetry sample (``events.telemetry.GpuTelemetry``, the same fields as `herd
gpu describe -o json`, docs/gpus.md), written to ``<state-dir>/fake-gpus.json`` when the
agent starts and after every `herd agent inject`, its path in every allocation's
environment as ``HERD_FAKE_GPUS``.

On a real node a check reads NVML itself (``nvidia-smi``, ``dcgmi diag``); on a fake node
NVML is the agent's memory, so this file is how a check (the validation gate's, a job's)
sees a fault injected into the GPUs: a throttled GPU's ``throttle_names``, a link's
``nvlink_up``, a failed row remap, a GPU fallen off the bus (its readings absent) or
missing (fewer ``gpus``). Written whole, then renamed into place: a reader never sees half
of it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from herdbook.agent import gpu
from herdbook.agent.executor import Executor
from herdbook.agent.telemetry_sampler import sample
from herdbook.events.codec import encode

log = logging.getLogger(__name__)
ENV = "HERD_FAKE_GPUS"
FILE = "fake-gpus.json"


def write(nvml: gpu.NvmlLike, node_id: str, path: Path) -> None:
    """The GPUs as they read now, replacing the file at ``path`` at once."""
    data = encode(sample(nvml, node_id, "", 0.0, hostname=""))
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_bytes(data)
    os.replace(partial, path)


def expose(nvml: gpu.NvmlLike, node_id: str, executor: Executor) -> Path:
    """Write the file beside the executor's allocation logs (the agent's state dir) and
    name it in the environment of every allocation the executor starts."""
    path = executor.alloc_dir.parent / FILE
    try:
        write(nvml, node_id, path)
    except Exception as err:  # noqa: BLE001 - a fake backend made to fail (a boot test)
        log.warning("%s: the fake GPUs are not shown to allocations: %s", node_id, err)
    executor.env[ENV] = str(path)
    return path
