"""The exec notifier with real commands, its retries and the failure event."""

from __future__ import annotations

from pathlib import Path

from herdbook.config import parse_config
from herdbook.events.node import (
    NodeCordoned,
    NodeDrainStarted,
    NodeNotificationFailed,
    NodeRegistered,
)
from herdbook.reactors.notifier import Notifier, action_for, has_drain_status
from herdbook.reactors.runner import DecideRunner
from tests.fakes import FakeClock, FakeProjector, FakeStore


class RecordingStore(FakeStore):
    @property
    def events(self) -> list[object]:
        """What the notifier appended (the node's registration is the test's)."""
        return [event for event, _ in self.appended]


def notifier(yaml: str) -> tuple[Notifier, RecordingStore]:
    projector = FakeProjector()
    store = RecordingStore(projector)
    store.fold(NodeRegistered(node_id="gpu-1", boot_id="b"))
    clock = FakeClock()
    return Notifier(parse_config(yaml).notifier, projector, clock=clock,  # type: ignore[arg-type]
                    runner=DecideRunner(store, projector, clock)), store  # type: ignore[arg-type]


def test_which_events_notify() -> None:
    assert action_for(NodeCordoned(node_id="n")) == "cordon"
    assert action_for(NodeDrainStarted(node_id="n")) == "drain"
    assert action_for(NodeNotificationFailed(node_id="n", action="x", reason="y")) is None


async def test_exec_fills_the_template_with_quoted_values(tmp_path: Path) -> None:
    out = tmp_path / "out"
    n, store = notifier(f"notifier: {{type: exec, exec: {{cordon: 'echo {{node_id}} "
                        f"{{reason}} > {out}'}}}}")
    assert await n.notify("cordon", "gpu-1", "it's hot; rm -rf /")
    assert out.read_text() == "gpu-1 it's hot; rm -rf /\n"
    assert store.events == []


async def test_a_failing_command_is_retried_then_recorded() -> None:
    n, store = notifier("notifier: {type: exec, retries: 2, backoff: 10ms,"
                        " exec: {drain: 'echo nope; exit 3'}}")
    assert not await n.notify("drain", "gpu-1", "")
    [event] = store.events
    assert isinstance(event, NodeNotificationFailed)
    assert event.attempts == 3 and "exited 3: nope" in event.reason


async def test_exec_drain_status_is_the_exit_code() -> None:
    n, _ = notifier("notifier: {type: exec, exec: {drain_status: 'test {node_id} = done'}}")
    assert has_drain_status(n.config)
    assert (await n.drained("done"))[0]
    assert not (await n.drained("busy"))[0]
