"""The allocation executor with real subprocesses and a fake ``report`` that folds what
it reports back into the views, as the agent's stream feed does."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from herdbook.agent import procs
from herdbook.agent.executor import VANISHED_AWAY, Executor
from herdbook.agent.workload_state import STATE_FILE, StateEntry, StateFile
from herdbook.events.alloc import (
    AllocCompleted,
    AllocEvent,
    AllocFailed,
    AllocLost,
    AllocPlaced,
    AllocRunning,
    AllocStopped,
    AllocStopRequested,
)
from herdbook.projector.alloc_view import AllocView, apply_alloc
from tests.conftest import poll

NODE = "n1"

CHECKPOINT = r"""
import signal, sys, time
def on(sig, frame):
    with open(sys.argv[1], "a") as f:
        f.write(signal.Signals(sig).name + "\n")
    if sig == signal.SIGTERM:
        sys.exit(0)
signal.signal(signal.SIGUSR1, on)
signal.signal(signal.SIGTERM, on)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""
IGNORES_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(3600)")
EXITS_5_ON_GO = ("import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
                 "sys.exit(5)")


async def until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    """A file or an entry that is not there yet is "not yet"."""
    return await poll(predicate, timeout, what, ignoring=(OSError, KeyError, IndexError))


class Node:
    """One executor and the views of its allocations; ``report`` folds and re-applies."""

    def __init__(self, state_dir: Path, report_gate: asyncio.Event | None = None) -> None:
        self.state_dir = state_dir
        self.events: list[AllocEvent] = []
        self.views: dict[str, AllocView] = {}
        self.seq = 0
        self.gate = report_gate
        self.executor = Executor(NODE, state_dir, self.report, poll_interval=0.05)
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.executor.run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    async def report(self, event: AllocEvent) -> None:
        if self.gate is not None:
            await self.gate.wait()
        self.events.append(event)
        view = self.fold(event)
        if view is not None:
            self.executor.apply(view)

    def fold(self, event: AllocEvent) -> AllocView | None:
        self.seq += 1
        view = apply_alloc(self.views.get(event.alloc_id), event, self.seq)
        if view is not None:
            self.views[event.alloc_id] = view
        return view

    def send(self, event: AllocEvent) -> None:
        """An event from the control plane: fold it, then apply the view."""
        view = self.fold(event)
        assert view is not None
        self.executor.apply(view, event if isinstance(event, AllocStopRequested) else None)

    def place(self, alloc_id: str, command: list[str]) -> None:
        self.send(AllocPlaced(node_id=NODE, alloc_id=alloc_id, job_id="job-1", eval_id="e1",
                              index=2, command=command))

    def of(self, alloc_id: str) -> list[AllocEvent]:
        return [e for e in self.events if e.alloc_id == alloc_id]

    def kinds(self, alloc_id: str) -> list[str]:
        return [type(e).__name__ for e in self.of(alloc_id)]

    def log(self, alloc_id: str) -> str:
        return (self.state_dir / "allocs" / f"{alloc_id}.log").read_text()

    def state(self) -> StateFile:
        return msgspec.json.decode((self.state_dir / STATE_FILE).read_bytes(), type=StateFile)

    async def ended(self, alloc_id: str) -> AllocEvent:
        def last() -> AllocEvent | None:
            events = self.of(alloc_id)
            if events and not isinstance(events[-1], AllocRunning):
                return events[-1]
            return None
        result: AllocEvent = await until(last, what=f"{alloc_id} to end")
        return result

    def pid(self, alloc_id: str) -> int:
        running = [e for e in self.of(alloc_id) if isinstance(e, AllocRunning)]
        return running[0].pid


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Callable[..., Node]]:
    made: list[Node] = []

    def make(state_dir: Path | None = None, **kwargs: Any) -> Node:
        node = Node(state_dir or tmp_path / "agent", **kwargs)
        made.append(node)
        return node

    yield make
    for node in made:
        await node.close()
    kill_groups({e.pid for node in made for e in node.events if isinstance(e, AllocRunning)})


@pytest.fixture
def strays() -> Any:
    """Process groups a test started by hand; killed in teardown."""
    pids: list[int] = []
    yield pids
    kill_groups(set(pids))


def kill_groups(pgids: set[int]) -> None:
    for pgid in pgids:
        procs.signal_group(pgid, signal.SIGKILL)
    for pgid in pgids:
        try:
            os.waitpid(pgid, 0)
        except ChildProcessError:
            pass


def orphan(command: list[str]) -> int:
    """Start ``command`` in its own session from a process that exits at once: the
    workload is not our child, as after an agent restart."""
    out = subprocess.run(
        [sys.executable, "-c", "import subprocess as sp, sys; print(sp.Popen(sys.argv[1:], "
         "start_new_session=True, stdin=sp.DEVNULL, stdout=sp.DEVNULL, stderr=sp.DEVNULL).pid)",
         *command],
        capture_output=True, text=True, check=True, timeout=30)
    return int(out.stdout)


def write_state(state_dir: Path, *entries: StateEntry) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE_FILE).write_bytes(msgspec.json.encode(
        StateFile(node_id=NODE, allocs=list(entries))))


def entry_for(state_dir: Path, alloc_id: str, pid: int, proc_start: int | None) -> StateEntry:
    return StateEntry(alloc_id=alloc_id, job_id="job-1", pid=pid, pgid=pid,
                      started_at=time.time(), proc_start=proc_start,
                      log=str(state_dir / "allocs" / f"{alloc_id}.log"),
                      exit_file=str(state_dir / "allocs" / f"{alloc_id}.exit"))


# -- running ------------------------------------------------------------------------


async def test_a_command_runs_with_its_environment_and_completes(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sh", "-c", "echo hello; echo $HERD_ALLOC_ID $HERD_JOB_ID "
                      "$HERD_ALLOC_INDEX $HERD_NODE_ID"])

    ended = await node.ended("a1")

    assert node.kinds("a1") == ["AllocRunning", "AllocCompleted"]
    assert isinstance(ended, AllocCompleted) and ended.exit_code == 0
    assert node.log("a1").splitlines() == ["hello", "a1 job-1 2 n1"]
    assert node.executor.running_count == 0
    await until(lambda: node.state().allocs == [], what="the entry to leave the state file")


async def test_a_non_zero_exit_fails_with_its_code(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sh", "-c", "exit 3"])

    ended = await node.ended("a1")

    assert isinstance(ended, AllocFailed)
    assert (ended.exit_code, ended.reason) == (3, "exit 3")
    assert node.views["a1"].status == "failed"


async def test_a_workload_killed_by_a_signal_exits_128_plus_the_signal(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sh", "-c", "kill -KILL $$"])

    ended = await node.ended("a1")

    assert isinstance(ended, AllocFailed)
    assert (ended.exit_code, ended.reason) == (137, "killed by SIGKILL")


async def test_a_command_that_cannot_start_fails_with_a_reason(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["no-such-binary-herdbook", "--flag"])

    ended = await node.ended("a1")

    assert node.kinds("a1") == ["AllocFailed"]
    assert isinstance(ended, AllocFailed) and ended.exit_code is None
    assert "'no-such-binary-herdbook'" in ended.reason and "not found" in ended.reason


async def test_applying_the_same_view_again_starts_nothing_twice(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sh", "-c", "exit 0"])
    node.executor.apply(node.views["a1"])

    await node.ended("a1")
    node.executor.apply(node.views["a1"])

    assert node.kinds("a1") == ["AllocRunning", "AllocCompleted"]


# -- stopping -----------------------------------------------------------------------


async def test_an_urgent_stop_sends_the_checkpoint_signal_then_sigterm(nodes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    marker = tmp_path / "signals"
    node.place("a1", [sys.executable, "-c", CHECKPOINT, str(marker)])
    await until(lambda: "ready" in node.log("a1"), what="the workload's handlers")

    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1", signal="SIGUSR1", grace_s=0.5,
                                 kill_timeout_s=3600))
    ended = await node.ended("a1")

    assert marker.read_text().splitlines() == ["SIGUSR1", "SIGTERM"]
    assert isinstance(ended, AllocStopped) and ended.exit_code == 0
    assert node.views["a1"].status == "stopped"


async def test_a_plain_stop_sends_sigterm(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sleep", "60"])
    await until(lambda: node.of("a1"))

    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1", kill_timeout_s=3600))
    ended = await node.ended("a1")

    assert isinstance(ended, AllocStopped) and ended.exit_code == 128 + signal.SIGTERM


async def test_a_forced_stop_kills_at_once(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", [sys.executable, "-c", IGNORES_SIGTERM])
    await until(lambda: "ready" in node.log("a1"))

    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1", force=True, kill_timeout_s=3600))
    ended = await node.ended("a1")

    assert isinstance(ended, AllocStopped) and ended.exit_code == 128 + signal.SIGKILL


async def test_a_forced_stop_escalates_a_graceful_one_under_way(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", [sys.executable, "-c", IGNORES_SIGTERM])
    await until(lambda: "ready" in node.log("a1"))
    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1", grace_s=3600, kill_timeout_s=3600))
    await until(lambda: node.state().allocs[0].stopping, what="the stop to be recorded")
    assert procs.is_alive(node.pid("a1"), None)   # SIGTERM is ignored

    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1", force=True, reason="deadline"))
    ended = await node.ended("a1")

    assert isinstance(ended, AllocStopped) and ended.exit_code == 128 + signal.SIGKILL


async def test_a_stop_before_the_start_reports_stopped_and_runs_nothing(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    placed = AllocPlaced(node_id=NODE, alloc_id="a1", job_id="j", eval_id="e", index=0,
                         command=["sleep", "60"])
    node.fold(placed)   # folded but not applied: the stop arrives before the agent acts
    node.send(AllocStopRequested(node_id=NODE, alloc_id="a1"))

    ended = await node.ended("a1")

    assert node.kinds("a1") == ["AllocStopped"] and node.executor.running_count == 0
    assert isinstance(ended, AllocStopped) and ended.exit_code is None


async def test_a_workload_written_off_as_lost_is_killed_and_not_reported_again(nodes) -> None:  # type: ignore[no-untyped-def]
    node = nodes()
    node.start()
    node.place("a1", ["sleep", "60"])
    await until(lambda: node.of("a1"))
    pid = node.pid("a1")

    node.send(AllocLost(node_id=NODE, alloc_id="a1", reason="node down"))
    await until(lambda: node.executor.running_count == 0, what="the workload to be killed")

    assert not procs.is_alive(pid, None)
    assert node.kinds("a1") == ["AllocRunning"]
    assert node.views["a1"].status == "lost"


# -- the state file and reattaching ---------------------------------------------------


async def test_shutdown_leaves_the_workload_running_and_a_new_executor_reattaches(  # type: ignore[no-untyped-def]
        nodes, tmp_path) -> None:
    first = nodes()
    first.start()
    go = tmp_path / "go"
    first.place("a1", [sys.executable, "-c", EXITS_5_ON_GO, str(go)])
    await until(lambda: first.of("a1"))
    pid = first.pid("a1")

    await first.close()
    first.executor.shutdown()

    assert procs.is_alive(pid, None)
    [entry] = first.state().allocs
    assert (entry.alloc_id, entry.job_id, entry.pid, entry.pgid) == ("a1", "job-1", pid, pid)
    assert entry.proc_start == procs.start_time(pid) and entry.started_at > 0
    assert entry.log.endswith("allocs/a1.log") and entry.exit_file.endswith("allocs/a1.exit")

    second = nodes()
    assert second.executor.reattaching
    await second.executor.reattach()

    assert not second.executor.reattaching and second.executor.running_count == 1
    assert [(type(e).__name__, e.pid, e.reattached) for e in second.events
            if isinstance(e, AllocRunning)] == [("AllocRunning", pid, True)]

    second.start()
    go.touch()
    ended = await second.ended("a1")

    assert isinstance(ended, AllocFailed) and ended.exit_code == 5   # from the exit file


async def test_a_reattached_workload_that_is_not_our_child_is_watched_through_proc(  # type: ignore[no-untyped-def]
        nodes, strays, tmp_path) -> None:
    state_dir = tmp_path / "agent"
    pid = orphan(["sleep", "60"])
    strays.append(pid)
    write_state(state_dir, entry_for(state_dir, "a1", pid, procs.start_time(pid)))
    node = nodes(state_dir)
    await node.executor.reattach()
    node.start()
    assert node.kinds("a1") == ["AllocRunning"]

    (state_dir / "allocs" / "a1.exit").write_text("7\n")
    procs.signal_group(pid, signal.SIGKILL)
    ended = await node.ended("a1")

    assert isinstance(ended, AllocFailed) and ended.exit_code == 7


@pytest.mark.parametrize(("exit_file", "expected"), [
    ("0\n", ("AllocCompleted", 0)),
    ("2\n", ("AllocFailed", 2)),
    (None, ("AllocLost", None)),
])
async def test_a_workload_that_ended_while_the_agent_was_away_is_settled_on_reattach(  # type: ignore[no-untyped-def]
        nodes, tmp_path, exit_file, expected) -> None:
    state_dir = tmp_path / "agent"
    dead = subprocess.Popen(["true"])   # a pid that has exited (start time 1: never reused)
    dead.wait()
    write_state(state_dir, entry_for(state_dir, "a1", dead.pid, proc_start=1))
    if exit_file is not None:
        (state_dir / "allocs").mkdir(parents=True)
        (state_dir / "allocs" / "a1.exit").write_text(exit_file)
    node = nodes(state_dir)

    await node.executor.reattach()

    [event] = node.of("a1")
    assert (type(event).__name__, getattr(event, "exit_code", None)) == expected
    if isinstance(event, AllocLost):
        assert event.reason == VANISHED_AWAY
    assert node.state().allocs == [] and node.executor.running_count == 0


async def test_a_reused_pid_is_not_taken_for_the_workload(nodes, strays, tmp_path) -> None:  # type: ignore[no-untyped-def]
    state_dir = tmp_path / "agent"
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    strays.append(stranger.pid)
    started = procs.start_time(stranger.pid)
    assert started is not None
    write_state(state_dir, entry_for(state_dir, "a1", stranger.pid, proc_start=started - 1))
    node = nodes(state_dir)

    await node.executor.reattach()

    assert node.kinds("a1") == ["AllocLost"] and node.executor.running_count == 0
    assert stranger.poll() is None   # left alone
    stranger.kill()
    stranger.wait()


async def test_an_entry_stays_in_the_state_file_until_its_end_is_reported(nodes) -> None:  # type: ignore[no-untyped-def]
    gate = asyncio.Event()
    node = nodes(report_gate=gate)
    node.start()
    node.place("a1", ["sh", "-c", "exit 0"])

    await until(lambda: node.executor.running_count == 0
                and (node.state_dir / "allocs" / "a1.exit").exists(), what="the exit")
    assert [e.alloc_id for e in node.state().allocs] == ["a1"]
    gate.set()

    await node.ended("a1")
    await until(lambda: node.state().allocs == [], what="the entry to be dropped")
    assert node.kinds("a1") == ["AllocRunning", "AllocCompleted"]


async def test_an_unreadable_state_file_is_kept_aside(tmp_path: Path) -> None:
    state_dir = tmp_path / "agent"
    state_dir.mkdir()
    (state_dir / STATE_FILE).write_text("{not json")

    async def report(event: AllocEvent) -> None:
        raise AssertionError(event)

    executor = Executor(NODE, state_dir, report)
    await executor.reattach()

    assert not executor.reattaching
    assert (state_dir / f"{STATE_FILE}.bad").read_text() == "{not json"


def test_signals_and_exit_reasons() -> None:
    assert procs.parse_signal("SIGUSR1") is signal.SIGUSR1
    assert procs.parse_signal("usr1") is signal.SIGUSR1
    assert procs.parse_signal("15") is signal.SIGTERM
    assert procs.parse_signal("SIGNOPE") is None
    assert procs.shell_code(-9) == 137 and procs.shell_code(3) == 3
    assert procs.exit_reason(143) == "killed by SIGTERM"
    assert procs.exit_reason(127) == "exit 127 (command not found)"
