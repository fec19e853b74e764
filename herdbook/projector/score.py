"""The fleet health score: "is my fleet good?" as one number 0-100 and its breakdown.
Pure: read from the node view.

Over the approved compute nodes that are not TERMINATED:

- ``gpus_healthy``: the share of their GPUs on nodes that are up (READY), not
  UNHEALTHY or DEGRADED, and not VALIDATING (a node whose validation check runs is not
  proven yet: docs/remediation.md#validation); a fleet without GPUs counts its nodes
  instead;
- ``schedulable``: the share of them the scheduler may place on;
- ``faults``: open faults by kind (``unhealthy``, ``degraded`` health, ``down``,
  ``failed``, ``quarantined``, conformance ``drift``), a node counted once per kind it
  shows;
- ``validating``: the nodes whose validation check runs (out of service, not a fault);
- ``validation_waiting``: the nodes due for a check that has not started (the gate holds
  them for a slot, ``validation.max_concurrent``): out of the scheduler's reach, so
  neither healthy nor schedulable here either. Which nodes wait depends on the config,
  so the caller says (``waiting``; ``reactors.validation_deciders.waiting``).

``score = round(100 * (gpus_healthy + schedulable) / 2)``; an empty fleet scores 100
(nothing is wrong with it) with zero nodes in its breakdown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import msgspec

from herdbook.events.states import Approval, Health, Lifecycle, NodeType
from herdbook.projector.node_view import NodeView


class FleetScore(msgspec.Struct, frozen=True, kw_only=True):
    score: int
    nodes: int
    gpus: int
    gpus_healthy: float
    schedulable: float
    faults: dict[str, int]
    validating: int = 0
    validation_waiting: int = 0


def _counted(view: NodeView) -> bool:
    return (view.type is NodeType.COMPUTE and view.approval is Approval.APPROVED
            and view.lifecycle is not Lifecycle.TERMINATED)


def faults_of(view: NodeView) -> list[str]:
    kinds = []
    if view.health is Health.UNHEALTHY:
        kinds.append("unhealthy")
    elif view.health is Health.DEGRADED:
        kinds.append("degraded")
    for lifecycle, kind in ((Lifecycle.DOWN, "down"), (Lifecycle.FAILED, "failed"),
                            (Lifecycle.QUARANTINED, "quarantined")):
        if view.lifecycle is lifecycle:
            kinds.append(kind)
    if view.drift:
        kinds.append("drift")
    return kinds


def fleet_score(views: Iterable[NodeView],
                waiting: Callable[[NodeView], bool] | None = None) -> FleetScore:
    nodes = [v for v in views if _counted(v)]
    if not nodes:
        return FleetScore(score=100, nodes=0, gpus=0, gpus_healthy=1.0, schedulable=1.0,
                          faults={})
    validating = {v.id for v in nodes if v.validation == "running"}
    held = ({v.id for v in nodes if v.id not in validating and waiting(v)}
            if waiting is not None else set())
    out = validating | held
    weight = {v.id: len(v.info.gpus) for v in nodes}
    gpus = sum(weight.values())
    if not gpus:
        weight = dict.fromkeys(weight, 1)
    healthy = sum(weight[v.id] for v in nodes if v.lifecycle is Lifecycle.READY
                  and v.health not in (Health.UNHEALTHY, Health.DEGRADED)
                  and v.id not in out)
    gpus_healthy = healthy / sum(weight.values())
    schedulable = sum(1 for v in nodes if v.schedulable and v.id not in held) / len(nodes)
    faults = Counter(kind for v in nodes for kind in faults_of(v))
    return FleetScore(score=round(100 * (gpus_healthy + schedulable) / 2), nodes=len(nodes),
                      gpus=gpus, gpus_healthy=round(gpus_healthy, 4),
                      schedulable=round(schedulable, 4), faults=dict(sorted(faults.items())),
                      validating=len(validating), validation_waiting=len(held))
