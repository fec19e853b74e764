"""`herd top`: one frame's numbers from a node list."""

from __future__ import annotations

from collections import deque

from rich.console import Console

from herdbook.cli.top import frame, summarize


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
