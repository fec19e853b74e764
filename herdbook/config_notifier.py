"""The config's ``notifier`` section: how the control plane tells the workload system
(Kubernetes, Slurm) about cordon, uncordon, drain and undrain (``reactors/notifier.py``)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from herdbook.config_rules import Section
from herdbook.durations import Duration

NotifierType = Literal["none", "webhook", "exec", "slurm"]

# Fixed text with {node_id} and {label:KEY} in braces; \A and \Z, not ^ and $: msgspec
# searches with re.search, whose $ also matches before a final newline.
SLURM_NODE_NAME = r"\A(?:[^{}]|\{node_id\}|\{label:[^{}]+\})+\Z"


class WebhookConfig(Section, frozen=True):
    cordon_url: str | None = None
    uncordon_url: str | None = None
    drain_url: str | None = None
    undrain_url: str | None = None
    drain_status_url: str | None = None
    """GET ``?node_id=`` -> ``{"drained": bool, "message": str}``; DRAINED waits for it."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    timeout: Duration = Duration(10.0)


class ExecConfig(Section, frozen=True):
    """Command templates; {node_id} and {reason} are filled in (shell-quoted)."""

    cordon: str | None = None
    uncordon: str | None = None
    drain: str | None = None
    undrain: str | None = None
    drain_status: str | None = None
    """Exit code 0 means drained."""
    timeout: Duration = Duration(30.0)


class SlurmConfig(Section, frozen=True):
    """``scontrol update`` (no shell): cordon, drain -> State=DRAIN Reason="herdbook: ...";
    uncordon, undrain -> State=RESUME; DRAINED when Slurm says IDLE+DRAIN or DOWN+DRAIN."""

    node_name: Annotated[str, Meta(pattern=SLURM_NODE_NAME, description=(
        "only {node_id} and {label:KEY} may stand in braces"))] = "{node_id}"
    """The Slurm node name: ``{node_id}`` and ``{label:KEY}`` (the node's label KEY) with
    fixed text around them, e.g. ``gpu-{node_id}`` or ``{label:slurm-node}``."""
    scontrol: str = "scontrol"
    conf: str | None = None
    """SLURM_CONF for scontrol (default: Slurm's own, /etc/slurm/slurm.conf)."""
    timeout: Duration = Duration(10.0)
    drain_status: bool = True
    """DRAINED waits for Slurm to say drained (no jobs left on the node)."""


class NotifierConfig(Section, frozen=True):
    type: NotifierType = "none"
    """none, webhook, exec or slurm: tells the workload system (Kubernetes, Slurm) about
    cordon, uncordon, drain and undrain."""
    webhook: WebhookConfig = WebhookConfig()
    exec: ExecConfig = ExecConfig()
    slurm: SlurmConfig = SlurmConfig()
    retries: int = 3
    backoff: Duration = Duration(1.0)
    drain_status_interval: Duration = Duration(5.0)
