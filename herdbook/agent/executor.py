"""The allocation executor: runs this node's allocations as subprocesses and reports what
happens to them. It knows nothing of NATS: every fact goes through ``report(event)``.

Usage (the agent does exactly this)::

    executor = Executor(node_id, state_dir, report)
    await executor.reattach()            # adopt workloads a previous agent left running
    task = asyncio.create_task(executor.run())   # watch workloads, send reports in order
    executor.apply(view, stop)           # for every allocation view of this node, on change
    executor.shutdown()                  # agent stops: state written, workloads keep running

Guarantees:
- Reports leave in the order they were made (one outbox, one sender), so a workload's
  ``alloc.running`` always precedes its end.
- A workload stays in ``agent-state.json`` until its terminal event has been stored, so
  an agent that dies in between reports the end on its next start (from the exit file).
- Exit codes follow the shell: 0..255 as the workload exited, ``128 + N`` when it was
  killed by signal N (SIGTERM 143, SIGKILL 137); see ``herdbook.agent.procs``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from herdbook.agent import procs
from herdbook.agent.workload import Workload
from herdbook.agent.workload_state import STATE_FILE, StateEntry, read_state, write_state
from herdbook.backoff import Backoff
from herdbook.events.alloc import (
    VALIDATION_JOB,
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocRunning,
    AllocStatus,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.projector.alloc_view import AllocView

log = logging.getLogger(__name__)

ALLOCS_DIR = "allocs"
OUTPUT_TAIL = 2048
REPORT_RETRY = Backoff(0.5, cap=10.0)
"""A workload's event not reported yet: 0.5 s, 1, 2 ... 10 s, in order (the next waits)."""
VANISHED_AWAY = "workload vanished while the agent was away"
VANISHED = "workload exited without leaving an exit status"
UNKNOWN = "the agent has no record of this workload"

Report = Callable[[AllocEvent], Awaitable[None]]


class Executor:
    def __init__(self, node_id: str, state_dir: str | Path, report: Report, *,
                 state_file: str | Path | None = None, actor: str | None = None,
                 poll_interval: float = 0.5, requeue_allowed: bool = True) -> None:
        self.node_id = node_id
        self.alloc_dir = Path(state_dir) / ALLOCS_DIR
        self.alloc_dir.mkdir(parents=True, exist_ok=True)
        self.state_file = Path(state_file) if state_file else Path(state_dir) / STATE_FILE
        self.actor = actor or f"agent:{node_id}"
        self.poll_interval = poll_interval
        self.requeue_allowed = requeue_allowed
        self.env: dict[str, str] = {}
        """Added to every allocation's environment (``HERD_FAKE_GPUS`` on a fake node)."""
        self._report = report
        self._local: dict[str, Workload] = {}
        self._unreported: dict[str, StateEntry] = {}
        """Ended workloads whose terminal event is not stored yet."""
        self._known: set[str] = set()
        """Every allocation this executor started, adopted or settled: never started again."""
        self._outbox: asyncio.Queue[tuple[AllocEvent, str | None]] = asyncio.Queue()
        self._saved = read_state(self.state_file, self.node_id)
        self.reattaching = bool(self._saved)
        """True from construction until ``reattach()`` is done if the state file lists
        workloads: the heartbeat carries it."""

    @property
    def running_count(self) -> int:
        """Live local workloads (stopping ones included)."""
        return len(self._local)

    def pid_of(self, alloc_id: str) -> int | None:
        workload = self._local.get(alloc_id)
        return workload.entry.pid if workload else None

    # -- reattach ---------------------------------------------------------------------

    async def reattach(self) -> None:
        """Settle every workload ``agent-state.json`` lists: adopt the live ones
        (``alloc.running`` with ``reattached``), report how the dead ones ended (exit file),
        or ``alloc.lost`` when nothing says. Reports directly, in order: call it before
        ``run()`` and ``apply()``. An entry leaves the file only once its report is stored."""
        self.reattaching = True
        try:
            while self._saved:
                entry = self._saved[0]
                self._known.add(entry.alloc_id)
                if procs.is_alive(entry.pid, entry.proc_start):
                    await self._report(AllocRunning(
                        node_id=self.node_id, alloc_id=entry.alloc_id, actor=self.actor,
                        pid=entry.pid, reattached=True))
                    self._local[entry.alloc_id] = Workload(entry)
                    log.info("%s: reattached to pid %d", entry.alloc_id, entry.pid)
                else:
                    reaped = procs.reap(entry.pid)
                    code = procs.read_exit_file(Path(entry.exit_file))
                    if code is None and reaped is not None:
                        code = reaped[1]
                    await self._report(self._ending(entry, code, VANISHED_AWAY))
                    log.info("%s: ended while the agent was away (exit %s)", entry.alloc_id, code)
                self._saved.pop(0)
                self._write_state()
        finally:
            self.reattaching = False

    # -- desired state ----------------------------------------------------------------

    def apply(self, view: AllocView, stop: AllocStopRequested | None = None) -> None:
        """Bring the local workload of ``view`` to its desired state. ``stop`` is the
        ``alloc.stop_requested`` just folded into the view (or the last one, on replay):
        its signal, grace and timeouts; a view that wants a stop without one gets the
        defaults. Idempotent: call it for every change of every allocation of this node."""
        workload = self._local.get(view.id)
        if workload is not None:
            if view.status is AllocStatus.LOST:
                self._kill_lost(workload)
            elif view.desired == "stop":
                self._request_stop(workload, stop or AllocStopRequested(
                    node_id=self.node_id, alloc_id=view.id))
            return
        if view.id in self._known:
            return
        self._known.add(view.id)
        if view.terminal:
            return
        if view.desired == "stop":
            # Stopped before it ever ran here (or the agent lost track of it): nothing runs.
            self._enqueue(AllocStopped(node_id=self.node_id, alloc_id=view.id, actor=self.actor))
        elif view.status is AllocStatus.PENDING:
            self._start(view)
        else:
            self._enqueue(AllocLost(node_id=self.node_id, alloc_id=view.id, actor=self.actor,
                                    reason=UNKNOWN, requeue_allowed=self.requeue_allowed))

    def _start(self, view: AllocView) -> None:
        log_path = self.alloc_dir / f"{view.id}.log"
        exit_file = self.alloc_dir / f"{view.id}.exit"
        env = {**os.environ, **self.env, "HERD_ALLOC_ID": view.id, "HERD_JOB_ID": view.job_id,
               "HERD_ALLOC_INDEX": str(view.index), "HERD_NODE_ID": self.node_id,
               "HERD_EXIT_FILE": str(exit_file)}
        problem = procs.find_command(view.command, env)
        if problem is None:
            exit_file.unlink(missing_ok=True)
            try:
                pid = procs.spawn(view.command, env, log_path)
            except OSError as err:
                problem = f"cannot start {view.command[0]!r}: {err.strerror or err}"
        if problem is not None:
            log.warning("%s: %s", view.id, problem)
            self._enqueue(AllocFailed(node_id=self.node_id, alloc_id=view.id, actor=self.actor,
                                      reason=problem))
            return
        entry = StateEntry(alloc_id=view.id, job_id=view.job_id, index=view.index, pid=pid,
                           pgid=pid, started_at=time.time(), proc_start=procs.start_time(pid),
                           log=str(log_path), exit_file=str(exit_file))
        self._local[view.id] = Workload(entry)
        self._write_state()
        self._enqueue(AllocRunning(node_id=self.node_id, alloc_id=view.id, actor=self.actor,
                                   pid=pid))
        log.info("%s: started pid %d: %s", view.id, pid, view.command)

    # -- stopping ---------------------------------------------------------------------

    def _request_stop(self, workload: Workload, stop: AllocStopRequested) -> None:
        """A force stop kills at once, also in the middle of a graceful one; a second
        graceful request while one is under way changes nothing."""
        if workload.killed or (workload.stopper is not None and not stop.force):
            return
        self._mark_stopping(workload)
        if stop.force:
            workload.kill()
            return
        workload.stopper = asyncio.create_task(workload.stop_sequence(stop),
                                               name=f"stop-{workload.entry.alloc_id}")

    def _kill_lost(self, workload: Workload) -> None:
        if workload.lost:
            return
        log.warning("%s: written off as lost by the control plane; killing pid %d",
                    workload.entry.alloc_id, workload.entry.pid)
        workload.lost = True
        if workload.stopper is not None:
            workload.stopper.cancel()
        workload.kill()

    def _mark_stopping(self, workload: Workload) -> None:
        if not workload.entry.stopping:
            workload.entry.stopping = True
            self._write_state()

    # -- watching and reporting -------------------------------------------------------

    async def run(self) -> None:
        """Watch the local workloads and send the reports, until cancelled."""
        await asyncio.gather(self._watch(), self._send())

    async def _watch(self) -> None:
        while True:
            for workload in list(self._local.values()):
                try:
                    ended, code = self._poll(workload.entry)
                    if ended:
                        self._ended(workload, code)
                except OSError as err:   # e.g. the state file cannot be written: next tick
                    log.error("%s: cannot watch: %s", workload.entry.alloc_id, err)
            await asyncio.sleep(self.poll_interval)

    @staticmethod
    def _poll(entry: StateEntry) -> tuple[bool, int | None]:
        """(ended, exit code): the exit file's code if the wrapper wrote one, else the
        wrapper's own wait status when it is our child, else None."""
        reaped = procs.reap(entry.pid)
        if reaped is None:
            if procs.is_alive(entry.pid, entry.proc_start):
                return False, None
            return True, procs.read_exit_file(Path(entry.exit_file))
        ended, code = reaped
        if not ended:
            return False, None
        from_file = procs.read_exit_file(Path(entry.exit_file))
        return True, from_file if from_file is not None else code

    def _ended(self, workload: Workload, code: int | None) -> None:
        entry = workload.entry
        del self._local[entry.alloc_id]
        workload.exited.set()
        log.info("%s: pid %d ended (exit %s)", entry.alloc_id, entry.pid, code)
        if not workload.lost:
            self._unreported[entry.alloc_id] = entry
            self._enqueue(self._ending(entry, code, VANISHED), settles=entry.alloc_id)
        self._write_state()

    def _ending(self, entry: StateEntry, code: int | None, vanished: str) -> AllocEvent:
        """How a workload that is gone ended: stopped on request, vanished without an
        exit status (``vanished`` says when), completed, or failed."""
        node_id, alloc_id, actor = self.node_id, entry.alloc_id, self.actor
        if entry.stopping:
            return AllocStopped(node_id=node_id, alloc_id=alloc_id, actor=actor, exit_code=code)
        if code is None:
            return AllocLost(node_id=node_id, alloc_id=alloc_id, actor=actor, reason=vanished,
                             requeue_allowed=self.requeue_allowed)
        # A node validation's output is its verdict's evidence: its tail goes with the end.
        output = (_tail(Path(entry.log), OUTPUT_TAIL) if entry.job_id == VALIDATION_JOB
                  else "")
        if code == 0:
            return AllocCompleted(node_id=node_id, alloc_id=alloc_id, actor=actor, exit_code=0,
                                  output=output)
        return AllocFailed(node_id=node_id, alloc_id=alloc_id, actor=actor, exit_code=code,
                           reason=procs.exit_reason(code), output=output)

    def _enqueue(self, event: AllocEvent, settles: str | None = None) -> None:
        self._outbox.put_nowait((event, settles))

    async def _send(self) -> None:
        while True:
            event, settles = await self._outbox.get()
            delays = REPORT_RETRY.delays()
            while True:
                try:
                    await self._report(event)
                    break
                except Exception as err:  # noqa: BLE001 - keep the order: retry this one
                    log.warning("%s not reported yet (%s); retrying", event.event_name, err)
                    await asyncio.sleep(next(delays))
            if settles is not None:
                self._unreported.pop(settles, None)
                self._write_state()

    # -- the state file ---------------------------------------------------------------

    def shutdown(self) -> None:
        """The agent is stopping: write the state file and leave every workload running
        (a stop sequence under way is resumed from the stream by the next agent)."""
        for workload in self._local.values():
            if workload.stopper is not None:
                workload.stopper.cancel()
        self._write_state()

    def _write_state(self) -> None:
        write_state(self.state_file, self.node_id, [
            *self._saved, *(w.entry for w in self._local.values()), *self._unreported.values()])


def _tail(path: Path, size: int) -> str:
    """The last ``size`` bytes of a workload's log, as text ("" when it cannot be read)."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            data = f.read(size)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")
