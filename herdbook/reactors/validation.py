"""The validation gate (docs/remediation.md#validation): a node is proven by a check
before it is back in service.

- A node is *due* (``NodeView.validation_due``, folded from the log) once it was DOWN,
  FAILED or UNHEALTHY (``returned``) or on its first approval (``approved``). When
  ``validation:`` is configured and names that trigger under ``when``, a due node that is
  READY again (approved, not UNHEALTHY, not disabled) gets ``node.validation_started``:
  it is VALIDATING, not schedulable. ``herd node validate`` starts one on demand
  (``decide_validate_request``, trigger ``operator``).
- The check runs as an allocation (``alloc_id`` chosen in the started event) of the
  pseudo job ``node-validation`` pinned to the node and holding all its GPUs, CPUs and
  memory, appended on the node's allocation aggregate at its version, as the scheduler's
  plans are; it is placed once no other allocation runs there, so it has the node alone.
  The agent runs it like any allocation and reports its end with its output's tail.
- Its end decides: exit 0 is ``node.validated`` (back in service); anything else (exit
  != 0, could not start, lost, stopped, or still running ``validation.timeout`` after it
  was placed: then it is killed) is ``node.validation_failed``, UNHEALTHY with the output's
  last line in the reason. The ``quarantine_after``-th failure within ``window``
  quarantines the node, unless the circuit breaker holds it (``node.action_held``, kind
  quarantine): it stays UNHEALTHY either way.
- A node that goes DOWN meanwhile interrupts its validation (its allocation is lost with
  it) and is due again.

Every step is a pure decider handed to the one decide runner; what is due is read from
the views, so a new leader (or a restarted control plane) carries on where the last one
stopped: ``start`` looks at every node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta

from herdbook.clock import Clock
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
    NodeValidationFailed,
    NodeValidationStarted,
)
from herdbook.events.states import Approval, Health, Intent, Lifecycle, NodeType
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker_deciders import Gate, Holds, gate_at
from herdbook.reactors.decide_runner import Context, DecideRunner, Decision
from herdbook.reactors.refused import AlreadyDone, CommandRefused

log = logging.getLogger(__name__)

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
        quarantine=quarantine), *held]


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


class ValidationReactor:
    """Leader only: starts due validations, places their allocations, decides their ends
    and timeouts. Work is queued by node id; each pass decides from the current views."""

    def __init__(self, projector: ProjectorRunner, config: Config, *, clock: Clock,
                 runner: DecideRunner, gate: Gate | None = None) -> None:
        self.projector = projector
        self.config = config
        self.validation = config.validation if config.validation.enabled else None
        self.clock = clock
        self.gate = gate
        self.runner = runner
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        # ``max_concurrent``'s bookkeeping, kept from every node change: the nodes whose
        # check runs, the fleet its share is of, and the due nodes that wait for a slot
        # (in the order they came: a dict).
        self._running: set[str] = set()
        self._fleet: set[str] = set()
        self._waiting: dict[str, None] = {}
        self._unsubscribe: list[Callable[[], None]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.validation is None:
            return   # no gate: today's behaviour
        self._unsubscribe = [self.projector.nodes.subscribe(self._on_node),
                             self.projector.allocs.subscribe(self._on_alloc)]
        self._task = asyncio.create_task(self._work(), name="validation")
        for view in self.projector.nodes.values():   # what a previous leader left
            self._count(view.id, view)
        for view in self.projector.nodes.values():
            if view.validation == "running" or view.validation_due:
                self._enqueue(view.id)

    async def stop(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    def _enqueue(self, node_id: str) -> None:
        if node_id not in self._queued:
            self._queued.add(node_id)
            self._queue.put_nowait(node_id)

    def _count(self, node_id: str, view: NodeView | None) -> bool:
        """Keep the running and fleet sets; True when the node's check stopped running
        (a slot freed)."""
        was = node_id in self._running
        if view is not None and view.validation == "running":
            self._running.add(node_id)
        else:
            self._running.discard(node_id)
        if view is not None and in_fleet(view):
            self._fleet.add(node_id)
        else:
            self._fleet.discard(node_id)
        return was and node_id not in self._running

    def _free(self) -> int | None:
        """Slots free now; None: no bound."""
        if self.validation is None:
            return 0
        bound = self.validation.concurrency(len(self._fleet))
        return None if bound is None else max(0, bound - len(self._running))

    def _release(self) -> None:
        """Queue as many waiting nodes as slots are free, first come first."""
        free = self._free()
        while self._waiting and (free is None or free > 0):
            node_id = next(iter(self._waiting))
            del self._waiting[node_id]
            self._enqueue(node_id)
            if free is not None:
                free -= 1

    def _on_node(self, node_id: str, view: NodeView | None, event: NodeEvent) -> None:
        if self._count(node_id, view):
            self._release()
        if view is None:
            self._waiting.pop(node_id, None)
        elif view.validation == "running" or view.validation_due:
            self._enqueue(node_id)

    def _on_alloc(self, alloc_id: str, alloc: AllocView | None, event: AllocEvent) -> None:
        node = self.projector.nodes.get(event.node_id)
        if node is not None and node.validation == "running":
            self._enqueue(event.node_id)   # its allocation moved, or another one ended

    async def _work(self) -> None:
        while True:
            node_id = await self._queue.get()
            self._queued.discard(node_id)
            try:
                await self.settle(node_id)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("validation of %s: deciding failed; retrying in 1s", node_id)
                await asyncio.sleep(1.0)
                self._enqueue(node_id)

    def _alloc_of(self, view: NodeView | None) -> AllocView | None:
        return None if view is None else self.projector.allocs.get(view.validation_alloc)

    def _allocs_on(self, node_id: str) -> list[AllocView]:
        return [a for a in self.projector.allocs.values() if a.node_id == node_id]

    async def settle(self, node_id: str) -> None:
        """Take the node's validation one step further, as far as the views allow."""
        validation = self.validation
        if validation is None:
            return
        nodes: Mapping[str, NodeView] = self.projector.nodes
        self._waiting.pop(node_id, None)
        started = await self.runner.run("node", node_id, lambda context: decide_due(
            nodes.get(node_id), validation, context, len(self._running), len(self._fleet)))
        for event in started.events:
            log.info("%s: validating (%s)", node_id, getattr(event, "reason", ""))
        view = nodes.get(node_id)
        if not started.events and view is not None:
            if due_trigger(view, validation) is not None:   # held by max_concurrent
                if not self._waiting:
                    log.info("%s: due for validation; waits for one of %d running to end "
                             "(validation.max_concurrent)", node_id, len(self._running))
                self._waiting[node_id] = None
                return
            self._release()   # a node queued for a slot that no longer needed it
        if view is None or view.validation != "running":
            return
        alloc = self._alloc_of(view)
        if alloc is None:
            await self.runner.run("alloc", node_id, lambda _: decide_place(
                nodes.get(node_id), self._allocs_on(node_id),
                self.projector.alloc_versions.get(node_id, 0)))
            alloc = self._alloc_of(nodes.get(node_id))
        if alloc is None:
            return
        if alloc.terminal:
            done = await self.runner.run("node", node_id, lambda context: decide_result(
                nodes.get(node_id), self._alloc_of(nodes.get(node_id)), validation, context,
                gate_at(self.gate, context.now)))
        else:
            done = await self.runner.run("node", node_id, lambda context: decide_timeout(
                nodes.get(node_id), self._alloc_of(nodes.get(node_id)), validation, context,
                gate_at(self.gate, context.now)))
            if done.events:   # timed out: kill what still runs
                alloc_id = alloc.id
                await self.runner.run("alloc", node_id, lambda _: decide_kill(
                    self.projector.allocs.get(alloc_id),
                    self.projector.alloc_versions.get(node_id, 0),
                    float(self.config.allocations.kill_timeout)))
            else:
                self._arm(node_id, alloc)
        for event in done.events:
            if isinstance(event, NodeValidated):
                log.info("%s: validated: back in service", node_id)
            elif isinstance(event, NodeValidationFailed):
                log.warning("%s: %s", node_id, event.reason)

    def _arm(self, node_id: str, alloc: AllocView) -> None:
        """Look again when the check's time is up (a timer per node, armed once)."""
        view = self.projector.nodes.get(node_id)
        if view is None or alloc.created_at is None or node_id in self._timers:
            return
        due = alloc.created_at + timedelta(seconds=view.validation_timeout_s)
        delay = max(0.0, (due - self.clock.now()).total_seconds()) + 0.05

        def fire() -> None:
            self._timers.pop(node_id, None)
            self._enqueue(node_id)

        self._timers[node_id] = asyncio.get_running_loop().call_later(delay, fire)
