"""The exec notifier with real commands (processes, so not in tests/unit), its retries and
the failure event, alone and through the decide runner against a racing writer."""

from __future__ import annotations

from pathlib import Path

from herdbook.config import parse_config
from herdbook.events.node import (
    NodeCordoned,
    NodeDeleted,
    NodeDrainStarted,
    NodeNotificationFailed,
    NodeRegistered,
)
from herdbook.reactors.decide_runner import DecideRunner
from herdbook.reactors.notifier import Notifier, has_drain_status
from herdbook.reactors.notifier_deciders import action_for
from tests.fakes import FakeClock, FakeProjector, FakeStore
from tests.unit.test_notifier_runner import World


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


async def test_exec_gets_the_event_id_and_the_recommended_action(tmp_path: Path) -> None:
    out = tmp_path / "out"
    n, _ = notifier(f"notifier: {{type: exec, exec: {{cordon: 'echo \"$HERD_EVENT_ID "
                    f"$HERD_EVENT_SEQ $HERD_RECOMMENDED_ACTION\" > {out}'}}}}")
    assert await n.notify("cordon", "gpu-1", "validation failed", key="e1", seq=7,
                          recommended="inspect_hardware")
    assert out.read_text() == "e1 7 inspect_hardware\n"
    assert await n.notify("cordon", "gpu-1", "op", key="e2", seq=8)   # an operator's cordon
    assert out.read_text() == "e2 8 \n"            # none: not set


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


async def test_a_failure_after_another_writer_is_recorded_once_from_the_newer_view() -> None:
    world = World()
    # given an operator's cordon lands while the notification was being retried
    world.store.race(NodeCordoned(node_id="n1", actor="op", reason="x"))
    assert not await world.notifier.notify("drain", "n1", "")
    [(event, expected)] = world.store.appended
    assert isinstance(event, NodeNotificationFailed) and "exited 3" in event.reason
    assert expected == world.store.seq - 1         # the cordon's sequence
    assert event.at == world.clock.now()


async def test_a_failure_for_a_deleted_node_records_nothing() -> None:
    world = World()
    world.store.fold(NodeDeleted(node_id="n1"))
    assert not await world.notifier.notify("drain", "n1", "")
    assert world.store.appended == []
