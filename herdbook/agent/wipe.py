"""The sensitive-node wipe (Lattice's release sequence): configured steps, run in order.

Real steps come from ``--wipe-config FILE`` (YAML: ``steps: [{name, command, timeout}]``);
an agent with ``--fake-gpus`` and no file runs fake steps that only succeed. A step
passes when its command exits 0 within its timeout. Each result is reported; the first
failure stops the wipe (the control plane then QUARANTINES the node)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import msgspec.yaml

from herdbook.events.base import Event
from herdbook.events.node import NodeWiped, NodeWipeFailed, NodeWipeStarted, NodeWipeStepReported


class WipeStep(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    command: list[str]
    timeout: float = 600.0


class WipeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    steps: list[WipeStep]


# What a GPU node runs by default: clear GPU memory, NVMe secure erase, RAM scrub,
# reboot into a clean image (the last one schedules the reboot and returns).
DEFAULT_STEPS = [
    WipeStep("gpu_memory_clear", ["nvidia-smi", "--gpu-reset"], 300.0),
    WipeStep("nvme_secure_erase", ["nvme", "format", "--ses=1", "/dev/nvme0n1"], 1200.0),
    WipeStep("ram_scrub", ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], 300.0),
    WipeStep("reboot_clean_image", ["shutdown", "-r", "+1", "herd: wiped, clean image"], 60.0),
]
FAKE_STEPS = [WipeStep(step.name, ["true"], 10.0) for step in DEFAULT_STEPS]


class WipeConfigError(ValueError):
    pass


def load_steps(path: str | None, fake: bool) -> list[WipeStep]:
    if path is None:
        return FAKE_STEPS if fake else DEFAULT_STEPS
    try:
        config = msgspec.yaml.decode(Path(path).read_bytes(), type=WipeConfig)
    except OSError as err:
        raise WipeConfigError(f"{path}: {err.strerror}") from err
    except msgspec.DecodeError as err:
        raise WipeConfigError(f"{path}: {err}") from err
    if not config.steps or any(not step.command for step in config.steps):
        raise WipeConfigError(f"{path}: steps: each step needs a name and a command")
    return config.steps


async def run_step(step: WipeStep) -> tuple[bool, str]:
    """Run one step; return (passed, what happened)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *step.command, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True)
    except OSError as err:
        return False, f"cannot run {step.command[0]!r}: {err.strerror}"
    try:
        code = await asyncio.wait_for(proc.wait(), step.timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False, f"timed out after {step.timeout:g}s"
    except asyncio.CancelledError:   # a new wipe replaced this one, or the agent stops
        proc.kill()
        await asyncio.shield(proc.wait())
        raise
    return (True, "ok") if code == 0 else (False, f"exit {code}")


async def run_wipe(steps: list[WipeStep], started: NodeWipeStarted, node_id: str, actor: str,
                   report: Callable[[Event], Awaitable[None]]) -> None:
    """Run the steps in order and report each; then ``node.wiped``, or ``node.wipe_failed``
    at the first failure. Every report is caused by ``started``."""
    done: list[str] = []
    for step in steps:
        ok, detail = await run_step(step)
        await report(NodeWipeStepReported(
            node_id=node_id, step=step.name, ok=ok, detail=detail, actor=actor,
            causation_id=started.event_id))
        if not ok:
            await report(NodeWipeFailed(node_id=node_id, step=step.name, reason=detail,
                                        actor=actor, causation_id=started.event_id))
            return
        done.append(step.name)
    await report(NodeWiped(node_id=node_id, steps=done, actor=actor,
                           causation_id=started.event_id))
