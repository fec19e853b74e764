"""Instance events (aggregate ``instance``, Navarch): what a provider created and you pay
for, kept apart from the node that registers on it."""

from __future__ import annotations

from typing import ClassVar

import msgspec

from herdbook.events.base import Event
from herdbook.events.states import NodeClass


class InstanceEvent(Event, frozen=True, kw_only=True):
    aggregate: ClassVar[str] = "instance"

    instance_id: str

    @property
    def aggregate_id(self) -> str:
        return self.instance_id


class InstanceProvisioning(InstanceEvent, frozen=True, kw_only=True,
                           tag="instance.provisioning"):
    pool: str
    provider: str
    node_id: str
    """The node id the agent on this instance will register with."""
    node_class: NodeClass = NodeClass.STANDARD
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    reason: str = ""
    replaces: str | None = None
    """The node this instance replaces (auto-replacement), if any."""


class InstanceProvisioned(InstanceEvent, frozen=True, kw_only=True,
                          tag="instance.provisioned"):
    """The provider created it: now waiting for its agent to register."""

    provider_ref: str = ""


class InstanceRunning(InstanceEvent, frozen=True, kw_only=True, tag="instance.running"):
    """Its agent registered."""

    node_id: str


class InstanceFailed(InstanceEvent, frozen=True, kw_only=True, tag="instance.failed"):
    """Provisioning failed, or no registration within registration_timeout."""

    reason: str


class InstanceTerminating(InstanceEvent, frozen=True, kw_only=True,
                          tag="instance.terminating"):
    reason: str = ""


class InstanceTerminated(InstanceEvent, frozen=True, kw_only=True, tag="instance.terminated"):
    reason: str = ""


class InstanceProviderError(InstanceEvent, frozen=True, kw_only=True,
                            tag="instance.provider_error"):
    """A provider call failed; ``operation`` is provision or terminate."""

    operation: str
    reason: str
