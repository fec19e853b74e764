"""The validation gate (docs/remediation.md#validation): a node is proven by a check
before it is back in service.

- A node is *due* (``NodeView.validation_due``, folded from the log) once it was DOWN,
  FAILED or UNHEALTHY (``returned``) or on its first approval (``approved``); a
  replacement instance's node is marked ``returned`` when it registers
  (``node.validation_due``), as the node it replaces would be. When
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
from collections.abc import Callable, Mapping
from datetime import timedelta

from herdbook.clock import Clock
from herdbook.config import Config
from herdbook.events.alloc import AllocEvent
from herdbook.events.node import (
    NodeEvent,
    NodeRegistered,
    NodeValidated,
    NodeValidationFailed,
)
from herdbook.projector.alloc_view import AllocView
from herdbook.projector.instance_view import InstanceView
from herdbook.projector.node_view import NodeView
from herdbook.projector.projection import ProjectorRunner
from herdbook.reactors.breaker_deciders import Gate, gate_at
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.validation_deciders import (
    decide_due,
    decide_kill,
    decide_place,
    decide_result,
    decide_successor,
    decide_timeout,
    due_trigger,
    in_fleet,
)

log = logging.getLogger(__name__)


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
            if (view.validation == "running" or view.validation_due
                    or self._replacing(view) is not None):
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
        elif (view.validation == "running" or view.validation_due
              or isinstance(event, NodeRegistered)):
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

    def _replacing(self, view: NodeView | None) -> InstanceView | None:
        """The instance of a node that stands for another (auto-replacement), if any and
        the node was never validated."""
        if view is None or view.validation:
            return None
        instance = self.projector.instances.get(view.info.instance_id or view.id)
        return instance if instance is not None and instance.replaces else None

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
        if self._replacing(nodes.get(node_id)) is not None:
            await self.runner.run("node", node_id, lambda _: decide_successor(
                nodes.get(node_id), self._replacing(nodes.get(node_id)), validation))
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
