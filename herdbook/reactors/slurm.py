"""The Slurm notifier's commands: cordon and drain set the Slurm node DRAIN with the reason,
uncordon and undrain RESUME it, and DRAINED is what Slurm says (``scontrol show node``).

Commands run without a shell (argv lists), so a reason cannot inject anything; the node
name is checked to be one plain Slurm name, because ``scontrol`` reads ``gpu-[1-64]`` or
``a,b`` as many nodes.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping

from herdbook.config import SlurmConfig

STATES: dict[str, str] = {"cordon": "DRAIN", "drain": "DRAIN",
                          "uncordon": "RESUME", "undrain": "RESUME"}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
PLACEHOLDER = re.compile(r"\{(node_id|label:[^{}]+)\}")
REASON_LIMIT = 200
# A node holding work while DRAIN is set is DRAINING; IDLE or DOWN with DRAIN is DRAINED.
BUSY = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


class SlurmError(RuntimeError):
    pass


def node_name(template: str, node_id: str, labels: Mapping[str, str]) -> str:
    """The Slurm node name for a herdbook node: ``{node_id}`` and ``{label:KEY}`` filled in."""
    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "node_id":
            return node_id
        label = key.removeprefix("label:")
        if label not in labels:
            raise SlurmError(f"node {node_id} has no label {label!r} to name its Slurm node")
        return labels[label]

    name = PLACEHOLDER.sub(fill, template)
    if not NAME.fullmatch(name):
        raise SlurmError(f"{name!r} (node {node_id}) is not one Slurm node name "
                         "(1-128 of A-Z a-z 0-9 . _ -)")
    return name


def clean_reason(action: str, reason: str) -> str:
    """``herdbook: <reason>`` on one line of printable text, at most 200 characters."""
    text = " ".join("".join(c if c.isprintable() else " " for c in reason).split())
    return f"herdbook: {text or action}"[:REASON_LIMIT]


def update_argv(scontrol: str, action: str, name: str, reason: str) -> list[str]:
    state = STATES[action]
    argv = [scontrol, "update", f"NodeName={name}", f"State={state}"]
    if state == "DRAIN":
        argv.append(f"Reason={clean_reason(action, reason)}")
    return argv


def node_state(output: str) -> str:
    """``State=`` of ``scontrol -o show node`` (e.g. ``IDLE+DRAIN``)."""
    for field in output.split():
        if field.startswith("State="):
            return field.removeprefix("State=")
    raise SlurmError(f"no State= in scontrol's answer: {output.strip()[:200]!r}")


def drain_reason(output: str) -> str:
    """``Reason=`` of ``scontrol -o show node``: the rest of the line, without Slurm's
    ``[user@time]`` stamp ("" when Slurm gives none)."""
    _, found, rest = output.partition(" Reason=")
    if not found:
        return ""
    return re.sub(r"\s*\[[^\]]*@[^\]]*\]\s*$", "", rest.strip())


def is_drained(state: str) -> bool:
    """Slurm's own DRAINED: the DRAIN flag on a node that holds no work (as ``sinfo``)."""
    base, *flags = state.upper().replace("*", "").split("+")
    return "DRAIN" in flags and base not in BUSY and "COMPLETING" not in flags


def draining_flag(state: str) -> bool:
    """The DRAIN flag is set (DRAINING or DRAINED): the only state RESUME undoes for us."""
    return "DRAIN" in state.upper().replace("*", "").split("+")[1:]


class Slurm:
    """``scontrol`` for one Slurm cluster (``SLURM_CONF`` from ``notifier.slurm.conf``)."""

    def __init__(self, config: SlurmConfig) -> None:
        self.config = config
        self.env = None if config.conf is None else {**os.environ, "SLURM_CONF": config.conf}

    def name(self, node_id: str, labels: Mapping[str, str]) -> str:
        return node_name(self.config.node_name, node_id, labels)

    async def update(self, action: str, name: str, reason: str) -> None:
        if STATES[action] == "RESUME" and not await self._ours_to_resume(name):
            return
        await self._run(update_argv(self.config.scontrol, action, name, reason))

    async def _ours_to_resume(self, name: str) -> bool:
        """RESUME only a drain herdbook set: a drain with another reason (an admin's) is not
        herdbook's to release, and a node without the DRAIN flag has nothing of ours to
        resume (Slurm's own DOWN returns to service by itself)."""
        shown = await self._show(name)
        if not draining_flag(node_state(shown)):
            return False
        held_for = drain_reason(shown)
        if not held_for.startswith("herdbook:"):
            raise SlurmError(f"Slurm node {name} is held for another reason "
                             f"({held_for[:120] or 'none given'!r}); not resumed")
        return True

    async def drained(self, name: str) -> tuple[bool, str]:
        state = node_state(await self._show(name))
        return is_drained(state), f"Slurm node {name} is {state}"

    async def _show(self, name: str) -> str:
        return await self._run([self.config.scontrol, "-o", "show", "node", name])

    async def _run(self, argv: list[str]) -> str:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env=self.env)
        except OSError as err:
            raise SlurmError(f"{argv[0]}: {err.strerror}") from None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), float(self.config.timeout))
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SlurmError(f"`{' '.join(argv[:4])}` timed out") from None
        text = out.decode(errors="replace").strip()
        if proc.returncode != 0:
            raise SlurmError(f"`{' '.join(argv[:4])}` exited {proc.returncode}: {text[:200]}")
        return text
