"""The validation gate's pure deciders (docs/remediation.md#validation): when a node is
due (a replacement's node too), when a check may start under the bound, the check's allocation and where it is
placed, and what its end, timeout or kill appends. Each takes the views and the
context and returns a ``Decision``; ``reactors.validation.ValidationReactor`` feeds
them to the one decide runner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from herdbook.config import Config, ValidationConfig
from herdbook.events.alloc import (
    LIVE,
    VALIDATION_JOB,
    AllocEvent,
    AllocPlaced,
    AllocStatus,
    AllocStopRequested,
)
from herdbook.events.breaker_events import HeldAction
from herdbook.events.job_events import Resources
from herdbook.events.node import (
    NodeEvent,
    NodeValidated,
    NodeValidationDue,
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.health.actions import action_for
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.reactors.breaker_deciders import Holds
from herdbook.reactors.decide_runner import Context, Decision
from herdbook.reactors.refused import AlreadyDone, CommandRefused

ACTOR = "validation"
OPERATOR = "operator"
MAX_REASON = 300


def last_line(output: str) -> str:
    """The output's last non-empty line: what a check prints last is its verdict."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:MAX_REASON] if lines else ""


def due_trigger(view: NodeView, validation: ValidationConfig | None) -> str | None:
    """The trigger for which ``view`` is validated now, or None."""
    if (validation is None or not view.validation_due
            or view.validation_due not in validation.when):
        return None
    if not _can_validate(view) or view.validation == "running":
        return None
    return view.validation_due


def waiting(view: NodeView, validation: ValidationConfig) -> bool:
    """Due for a check the gate runs, able to run it, not started: it waits for the
    leader (a moment) or for a slot (``max_concurrent``), out of the scheduler's reach."""
    return validation.enabled and due_trigger(view, validation) is not None


def validation_waiting(config: Config) -> Callable[[NodeView], bool] | None:
    """``waiting`` for the fleet score (``projector/score.py``), or None without a gate."""
    validation = config.validation
    if not validation.enabled:
        return None
    return lambda view: waiting(view, validation)


def _can_validate(view: NodeView) -> bool:
    return (view.type is NodeType.COMPUTE and view.approval is Approval.APPROVED
            and view.lifecycle is Lifecycle.READY and view.health is not Health.UNHEALTHY
            and view.intent is not Intent.DISABLED)


def _started(view: NodeView, validation: ValidationConfig, trigger: str, reason: str,
             actor: str, context: Context) -> NodeValidationStarted:
    return NodeValidationStarted(
        node_id=view.id, actor=actor, trigger=trigger, check=validation.name,
        command=list(validation.command), timeout_s=float(validation.timeout),
        alloc_id=context.new_id()[:20], reason=reason)


_WHY = {"returned": "back from {state}", "approved": "first approval"}


def in_fleet(view: NodeView) -> bool:
    """Counted in the fleet that ``validation.max_concurrent``'s share is of."""
    return (view.type is NodeType.COMPUTE and view.approval is Approval.APPROVED
            and view.lifecycle is not Lifecycle.TERMINATED)


def held_by_bound(validation: ValidationConfig, running: int, fleet: int) -> bool:
    """No slot free: ``running`` validations already run where ``validation.
    max_concurrent`` allows that many in a fleet of ``fleet`` nodes."""
    bound = validation.concurrency(fleet)
    return bound is not None and running >= bound


def decide_due(view: NodeView | None, validation: ValidationConfig | None,
               context: Context, running: int = 0,
               fleet: int = 0) -> Decision[NodeEvent] | None:
    """Start the validation a due node needs, unless ``running`` validations already use
    every slot ``validation.max_concurrent`` gives a fleet of ``fleet`` nodes: then it
    waits, out of service, for one to end (turning the gate on, or a rack coming back,
    must not take every due node out at once)."""
    if view is None:
        return None
    trigger = due_trigger(view, validation)
    if trigger is None or validation is None:
        return None
    if held_by_bound(validation, running, fleet):
        return None
    reason = _WHY.get(trigger, trigger).format(state=view.lifecycle_reason or "a fault")
    return Decision(view.version, [_started(view, validation, trigger, reason, ACTOR,
                                            context)])


def decide_successor(view: NodeView | None, instance: InstanceView | None,
                     validation: ValidationConfig | None) -> Decision[NodeEvent] | None:
    """A replacement instance's node (``instance.replaces`` names the node it stands for)
    is due as ``returned`` from its registration on, never validated yet: the gate's
    ``when: [returned]`` proves a replacement as it does the node it replaces (first
    approval alone would leave it to ``approved``)."""
    if (view is None or instance is None or validation is None or not instance.replaces
            or instance.node_id != view.id or "returned" not in validation.when
            or view.validation or view.validation_due == "returned"
            or view.type is not NodeType.COMPUTE or view.lifecycle is Lifecycle.TERMINATED):
        return None
    return Decision(view.version, [NodeValidationDue(
        node_id=view.id, actor=ACTOR, trigger="returned",
        reason=f"replaces {instance.replaces}")])


def decide_validate_request(view: NodeView, validation: ValidationConfig | None,
                            live_allocs: int, actor: str, reason: str,
                            context: Context) -> Decision[NodeEvent]:
    """``herd node validate``: refused without a configured check, on a node that is not
    READY, UNHEALTHY (its uncordon validates it) or runs allocations (drain it first)."""
    if validation is None:
        raise CommandRefused("no validation check is configured (validation: in the control "
                             "plane's config)")
    if view.validation == "running":
        raise AlreadyDone(f"node {view.id} already validating ({view.validation_check}, "
                          f"allocation {view.validation_alloc})")
    if view.type is not NodeType.COMPUTE or view.approval is not Approval.APPROVED:
        raise CommandRefused(f"cannot validate node {view.id}: it is {view.approval.value} "
                             f"{view.type.value} node")
    if view.health is Health.UNHEALTHY:
        raise CommandRefused(f"cannot validate node {view.id}: it is UNHEALTHY; `herd node "
                             f"uncordon {view.id}` clears that and validates it")
    if not _can_validate(view):
        raise CommandRefused(f"cannot validate node {view.id}: it is {view.state}, not READY")
    if live_allocs:
        raise CommandRefused(f"cannot validate node {view.id}: {live_allocs} allocation(s) run "
                             f"on it; drain it first (herd node drain {view.id})")
    return Decision(view.version, [_started(view, validation, OPERATOR,
                                            reason or "requested", actor, context)])


def decide_place(view: NodeView | None, allocs: Iterable[AllocView],
                 alloc_version: int) -> Decision[AllocEvent] | None:
    """The running validation's allocation, once nothing else runs on the node: all its
    GPUs, CPUs and memory, so that nothing else fits beside it."""
    if view is None or view.validation != "running":
        return None
    mine = list(allocs)
    if any(a.id == view.validation_alloc for a in mine):
        return None
    if any(a.status in LIVE for a in mine):
        return None   # placed once they end (``ValidationReactor._on_alloc``)
    return Decision(alloc_version, [AllocPlaced(
        node_id=view.id, alloc_id=view.validation_alloc, job_id=VALIDATION_JOB,
        eval_id="", index=0, command=list(view.validation_command),
        resources=Resources(cpu=float(view.info.cpus or 1), memory_mb=0,
                            gpus=len(view.info.gpus)),
        actor=ACTOR, causation_id=None)])


def failures_within(view: NodeView, window: float, now: datetime) -> int:
    since = now - timedelta(seconds=window)
    return sum(1 for at in view.validation_failures if at >= since)


def _failed(view: NodeView, validation: ValidationConfig, how: str, output: str,
            exit_code: int | None, now: datetime, gate: Holds | None) -> list[NodeEvent]:
    """``node.validation_failed``, quarantining at the ``quarantine_after``-th failure
    within the window unless the breaker holds it (its ``node.action_held`` follows)."""
    failures = failures_within(view, float(validation.window), now) + 1
    line = last_line(output)
    reason = f"validation {view.validation_check} {how}" + (f": {line}" if line else "")
    started = view.validation_started_at
    took = 0.0 if started is None else max(0.0, (now - started).total_seconds())
    quarantine = 0 < validation.quarantine_after <= failures
    held: list[NodeEvent] = []
    if quarantine and gate is not None:
        instead = gate(view, HeldAction.QUARANTINE,
                       f"QUARANTINED: {failures} failed validations")
        if instead is not None:
            quarantine, held = False, instead
    return [NodeValidationFailed(
        node_id=view.id, actor=ACTOR, alloc_id=view.validation_alloc, reason=reason,
        check=view.validation_check, trigger=view.validation_trigger, exit_code=exit_code,
        started_at=started, duration_s=took, output=output, failures=failures,
        quarantine=quarantine, recommended_action=action_for("check", name="validation")),
        *held]


def decide_result(view: NodeView | None, alloc: AllocView | None,
                  validation: ValidationConfig, context: Context,
                  gate: Holds | None = None) -> Decision[NodeEvent] | None:
    """How the validation's allocation ended decides the validation."""
    if (view is None or alloc is None or view.validation != "running"
            or alloc.id != view.validation_alloc or not alloc.terminal):
        return None
    if alloc.status is AllocStatus.COMPLETE:
        started = view.validation_started_at
        took = 0.0 if started is None else max(0.0, (context.now - started).total_seconds())
        return Decision(view.version, [NodeValidated(
            node_id=view.id, actor=ACTOR, alloc_id=alloc.id, check=view.validation_check,
            trigger=view.validation_trigger, started_at=started, duration_s=took,
            output=alloc.output)])
    how = {AllocStatus.FAILED: (f"exited {alloc.exit_code}" if alloc.exit_code is not None
                                else f"could not run ({alloc.status_reason})"),
           AllocStatus.LOST: f"was lost ({alloc.status_reason})",
           AllocStatus.STOPPED: f"was stopped ({alloc.status_reason})"}[alloc.status]
    return Decision(view.version, _failed(view, validation, how, alloc.output,
                                          alloc.exit_code, context.now, gate))


def decide_timeout(view: NodeView | None, alloc: AllocView | None,
                   validation: ValidationConfig, context: Context,
                   gate: Holds | None = None) -> Decision[NodeEvent] | None:
    """Still running ``timeout_s`` after it was placed: failed (the caller kills it)."""
    if (view is None or alloc is None or view.validation != "running"
            or alloc.id != view.validation_alloc or alloc.terminal
            or alloc.created_at is None):
        return None
    if context.now < alloc.created_at + timedelta(seconds=view.validation_timeout_s):
        return None
    return Decision(view.version, _failed(
        view, validation, f"did not finish within {view.validation_timeout_s:g}s", "", None,
        context.now, gate))


def decide_kill(alloc: AllocView | None, alloc_version: int,
                kill_timeout: float) -> Decision[AllocEvent] | None:
    """Kill a validation's allocation whose validation was decided without it (timeout)."""
    if alloc is None or alloc.terminal or alloc.desired == "stop":
        return None
    return Decision(alloc_version, [AllocStopRequested(
        node_id=alloc.node_id, alloc_id=alloc.id, reason="validation timed out",
        kill_timeout_s=kill_timeout, force=True, actor=ACTOR)])
