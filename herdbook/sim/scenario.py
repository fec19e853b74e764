"""The scenario of `herd sim`: msgspec Structs, decoded from YAML by
``sim.scenario_file``."""

from __future__ import annotations

from typing import Any

import msgspec

from herdbook.durations import Duration
from herdbook.events.states import NodeClass


class _Struct(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    pass


class FleetGroup(_Struct, frozen=True):
    """``count`` nodes named ``<prefix>-001`` .. ``<prefix>-<count>``."""

    count: int = 1
    prefix: str = "node"
    node_class: NodeClass = msgspec.field(default=NodeClass.STANDARD, name="class")
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    gpus: int = 8
    heartbeat_interval: Duration = Duration(1.0)
    health_interval: Duration = Duration(10.0)
    boot_retry_interval: Duration = Duration(0.3)
    lightweight: bool = False
    """Simulate the nodes with one task publishing their registration, boot check and
    heartbeats (thousands per process) instead of one real ``Agent`` each."""


class NodeMatch(_Struct, frozen=True):
    """Which nodes (``node``, ``nodes``, ``prefix``, ``pool``, ``labels``) and what they
    must be (every other key; a list means any of)."""

    node: str | None = None
    nodes: str | list[str] | None = None
    """``all`` (every fleet node) or a list of node ids."""
    prefix: str | None = None
    pool: str | None = None
    labels: dict[str, str] | None = None
    state: str | list[str] | None = None
    lifecycle: str | list[str] | None = None
    health: str | list[str] | None = None
    intent: str | list[str] | None = None
    approval: str | list[str] | None = None
    schedulable: bool | None = None
    heartbeating: bool | None = None
    fields: dict[str, Any] | None = None
    """Any other key of the API's node object (``herd node describe -o json``)."""

    def selects(self) -> bool:
        return any(v is not None for v in (self.node, self.nodes, self.prefix, self.pool,
                                           self.labels))


class InstanceMatch(_Struct, frozen=True):
    pool: str | None = None
    state: str | list[str] | None = None
    node: str | None = None
    replaces: bool | None = None
    """True: only replacements (instances that replace an unhealthy node's)."""


class Check(NodeMatch, frozen=True):
    """``assert`` and ``wait_for``: either every selected node matches, or a count of
    nodes (``count``) or instances (``instances``) compares with a number."""

    count: NodeMatch | None = None
    instances: InstanceMatch | None = None
    equals: int | None = None
    at_least: int | None = None
    at_most: int | None = None
    timeout: Duration | None = None
    """wait_for only [default 30s]."""

    def counting(self) -> bool:
        return self.count is not None or self.instances is not None


class Inject(_Struct, frozen=True):
    """Into ``node`` (a fleet node), or into one READY node of ``pool`` picked with the
    seed (e.g. a node that a pool's provider started)."""

    fault: str
    node: str | None = None
    pool: str | None = None
    value: float | None = None
    gpu: int = 0


class NodeAction(_Struct, frozen=True):
    node: str | list[str]

    def node_ids(self) -> list[str]:
        return [self.node] if isinstance(self.node, str) else list(self.node)


class Start(NodeAction, frozen=True):
    gpus: int | None = None
    """Restart with this many GPUs: a count other than the registered one fails the
    agent's boot check."""


class ApiCall(_Struct, frozen=True):
    """Any API route (``herd.api.v1.<route>``); the body is the other keys plus ``body``."""

    route: str
    expect: str = "ok"
    """ok, unchanged (ok, and the goal already held: an idempotent command appended
    nothing), refused, not_found, bad_request, or failed (any error)."""
    id: str | None = None
    reason: str | None = None
    user: str | None = None
    tenant: str | None = None
    pool: str | None = None
    size: int | None = None
    force: bool | None = None
    urgent: bool | None = None
    body: dict[str, Any] = msgspec.field(default_factory=dict)

    def request(self) -> dict[str, Any]:
        out: dict[str, Any] = {"actor": "sim"}
        for key in ("id", "reason", "user", "tenant", "pool", "size", "force", "urgent"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return {**out, **self.body}


class ScenarioStep(_Struct, frozen=True):
    """One timeline entry: exactly one action."""

    wait_for: Check | None = None
    assert_: Check | None = msgspec.field(default=None, name="assert")
    inject: Inject | None = None
    stop: NodeAction | None = None
    start: Start | None = None
    partition: NodeAction | None = None
    recover: NodeAction | None = None
    command: ApiCall | None = None
    wait: Duration | None = None

    def action(self) -> tuple[str, Any]:
        [(name, value)] = [(n, v) for n, v in self._set()]
        return name, value

    def _set(self) -> list[tuple[str, Any]]:
        return [(ACTION_NAMES.get(name, name), getattr(self, name))
                for name in self.__struct_fields__ if getattr(self, name) is not None]


ACTION_NAMES = {"assert_": "assert"}
ACTIONS = ("wait_for", "assert", "inject", "stop", "start", "partition", "recover", "command",
           "wait")
EXPECTS = ("ok", "unchanged", "refused", "not_found", "bad_request", "failed")
DEFAULT_WAIT_TIMEOUT = 30.0
MAX_AGENTS = 3000
"""Real agents per run: they all share this process's one event loop with the control
plane, and past a few thousand its lag alone makes heartbeats late (false alarms).
More nodes: ``lightweight: true``."""


class Scenario(_Struct, frozen=True):
    name: str
    description: str = ""
    seed: int | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    """herd config overrides (the `herd up --config` format)."""
    fleet: list[FleetGroup] = msgspec.field(default_factory=list)
    timeline: list[ScenarioStep] = msgspec.field(default_factory=list)

    def node_ids(self) -> list[str]:
        return [node_id for group in self.fleet for node_id in group_ids(group)]


def group_ids(group: FleetGroup) -> list[str]:
    width = max(3, len(str(group.count)))
    return [f"{group.prefix}-{i:0{width}d}" for i in range(1, group.count + 1)]


CONDITION_KEYS = ("state", "lifecycle", "health", "intent", "approval", "schedulable",
                  "heartbeating")
