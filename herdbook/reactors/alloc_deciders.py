"""The allocation reactor's deciders: given the read model and what happened to a node,
the allocation events due on it (one decision on the node's allocation aggregate,
``herd.alloc.<node_id>.>``, at the version the view holds). Pure: the reactor runs them
through the decide runner.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from herdbook.events.alloc import LIVE, AllocEvent, AllocLost, AllocStopRequested
from herdbook.events.states import Intent, NodeClass
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.tables import ReadModel
from herdbook.reactors.decide_runner import Context, Decision

ACTOR = "allocations"


@dataclass(frozen=True)
class LoseAllocations:
    """The node went down, or was disabled, deleted or terminated."""

    node_id: str
    reason: str
    cause: str | None = None


@dataclass(frozen=True)
class DrainAllocations:
    """The node's drain started: stop what runs there so it migrates elsewhere; an urgent
    drain asks for a checkpoint first."""

    node_id: str
    urgent: bool
    checkpoint_signal: str
    checkpoint_grace_s: float
    kill_timeout_s: float
    cause: str | None = None


@dataclass(frozen=True)
class KillAtDrainDeadline:
    """The drain's deadline passed."""

    node_id: str


def live_on(allocs: Iterable[AllocView], node_id: str) -> list[AllocView]:
    """The node's allocations that are not over yet, by id."""
    return sorted((a for a in allocs if a.node_id == node_id and a.status in LIVE),
                  key=lambda a: a.id)


def sensitive(model: ReadModel, node_id: str) -> bool:
    """Allocations lost on a sensitive node are requeued only by an operator."""
    node = model.nodes.get(node_id)
    return node is not None and node.info.node_class is NodeClass.SENSITIVE


def decide_lost(model: ReadModel, command: LoseAllocations,
                context: Context) -> Decision[AllocEvent]:
    """Every live allocation of the node is lost."""
    requeue = not sensitive(model, command.node_id)
    return Decision(model.alloc_versions.get(command.node_id, 0), [
        AllocLost(node_id=command.node_id, alloc_id=a.id, reason=command.reason,
                  requeue_allowed=requeue, actor=ACTOR, causation_id=command.cause)
        for a in live_on(model.allocs.values(), command.node_id)])


def decide_drain(model: ReadModel, command: DrainAllocations,
                 context: Context) -> Decision[AllocEvent]:
    """A migrating stop for every live allocation still meant to run."""
    urgent = command.urgent
    return Decision(model.alloc_versions.get(command.node_id, 0), [
        AllocStopRequested(
            node_id=command.node_id, alloc_id=a.id, migrate=True,
            reason="urgent drain" if urgent else "drain",
            signal=command.checkpoint_signal if urgent else "SIGTERM",
            grace_s=command.checkpoint_grace_s if urgent else 0.0,
            kill_timeout_s=command.kill_timeout_s, actor=ACTOR, causation_id=command.cause)
        for a in live_on(model.allocs.values(), command.node_id) if a.desired == "run"])


def decide_drain_deadline(model: ReadModel, command: KillAtDrainDeadline,
                          context: Context) -> Decision[AllocEvent] | None:
    """Kill whatever still runs on a node that is still draining."""
    node = model.nodes.get(command.node_id)
    if node is None or node.intent is not Intent.DRAINING:
        return None
    return Decision(model.alloc_versions.get(command.node_id, 0), [
        AllocStopRequested(node_id=command.node_id, alloc_id=a.id, migrate=True,
                           reason="drain deadline", force=True, actor=ACTOR)
        for a in live_on(model.allocs.values(), command.node_id)])


def jobs_of(model: ReadModel, events: Iterable[AllocEvent]) -> list[str]:
    """The jobs whose allocations these events touched, sorted."""
    return sorted({model.allocs[e.alloc_id].job_id for e in events
                   if e.alloc_id in model.allocs})
