"""`herd top`: one frame's numbers from a node list."""

from __future__ import annotations

from collections import deque

from rich.console import Console

from herdbook.cli.top import RECENT, frame, seed, summarize
from herdbook.events.base import Event
from herdbook.events.codec import encode
from herdbook.events.node import NodeConformanceChanged, NodeCordoned, NodeDown
from herdbook.events.store import subject_of


def test_counts_lags_and_changes_since_the_last_frame() -> None:
    nodes = [{"id": f"n{i}", "state": "READY", "heartbeat_age": float(i)} for i in range(10)]
    nodes[3]["state"] = "DOWN"
    nodes[4]["heartbeat_age"] = None
    summary = summarize(nodes, {"n3": "READY", "n5": "READY"})
    assert summary["states"] == {"READY": 9, "DOWN": 1}
    assert (summary["p50"], summary["max"]) == (5.0, 9.0)
    assert summary["changed"] == [("n3", "READY", "DOWN")]


def test_a_frame_renders_every_state_present() -> None:
    summary = summarize([{"id": "a", "state": "DRAINING", "heartbeat_age": 1.0},
                         {"id": "b", "state": "READY", "heartbeat_age": None}], {})
    console = Console(record=True, width=160)
    console.print(frame(summary, {"projector_lag": 7}, deque(["10:00:00 down a"]),
                        deque(["a: READY → DRAINING"]), "nats://x"))
    text = console.export_text()
    assert "projector lag 7 events" in text and "DRAINING" in text and "READY" in text
    assert "a: READY → DRAINING" in text and "10:00:00 down a" in text


def _raw(seq: int, event: Event) -> tuple[int, str, bytes]:
    return seq, subject_of(event), encode(event)


def test_once_shows_the_panels_from_stored_events_without_a_quit_hint() -> None:
    stored = [_raw(1, NodeCordoned(node_id="gpu-1", reason="maintenance")),
              _raw(2, NodeConformanceChanged(node_id="gpu-1", fingerprint="f1")),
              _raw(3, NodeDown(node_id="a-rather-long-node-17", reason="heartbeat timeout"))]
    events: deque[str] = deque(maxlen=RECENT)
    changes: deque[str] = deque(maxlen=RECENT)
    seed(stored, {"gpu-1": "CORDONED", "a-rather-long-node-17": "DOWN"}, events, changes)
    assert [line.split()[1] for line in events] == ["down", "conformance_changed", "cordoned"]
    # a conformance change leaves the one-word state as it was: not a state change
    assert [line.split(" ", 1)[1] for line in changes] == [
        "a-rather-long-node-17: down (now DOWN)", "gpu-1: cordoned (now CORDONED)"]
    summary = summarize([{"id": "gpu-1", "state": "CORDONED", "heartbeat_age": 1.0}], {})
    console = Console(record=True, width=200)
    console.print(frame(summary, {"projector_lag": 0}, events, changes, "nats://x", live=False))
    text = console.export_text()
    assert "state changes" in text and "gpu-1: cordoned (now CORDONED)" in text
    assert "conformance_changed a-rather-long-node-17" not in text
    assert "conformance_changed gpu-1" in text and "Ctrl-C" not in text
    live = Console(record=True, width=200)
    live.print(frame(summary, {}, events, changes, "nats://x"))
    assert "Ctrl-C" in live.export_text()
