"""What the notifier may commit (issue 26 item 7): a low-water mark below the oldest
notification still running, each sequence taken once, and a stored value read back."""

from __future__ import annotations

import msgspec

from herdbook.events.positions import Position, decode_position
from herdbook.reactors.tracking import Progress


def test_the_mark_stays_below_the_oldest_action_running() -> None:
    progress = Progress(10)
    assert progress.committable == 10
    for seq in (11, 12, 13, 14):
        assert progress.see(seq)
    progress.begin(12)
    progress.begin(14)
    # 11 and 13 called for nothing; 12 and 14 are being sent
    assert progress.committable == 11
    progress.end(14)              # a later one done first: the mark waits for 12
    assert progress.committable == 11
    progress.end(12)
    assert progress.committable == 14
    assert progress.running == 0


def test_each_sequence_is_taken_once() -> None:
    """The log's catch-up and the live view may both hand over the same event."""
    progress = Progress(5)
    assert not progress.see(5)      # at or before the position: acted on already
    assert not progress.see(3)
    assert progress.see(7)
    assert not progress.see(7)
    assert not progress.see(6)      # behind what was seen: the feed is in order
    assert progress.through == 7


def test_a_stored_position_is_read_back_and_garbage_is_none() -> None:
    value = msgspec.json.encode(Position(seq=42, by="cp-a", at="2025-01-01T00:00:00Z"))
    assert decode_position(value) == 42
    assert decode_position(None) is None
    assert decode_position(b"") is None
    assert decode_position(b"not json") is None
    assert decode_position(b'{"seq": -1}') is None
    assert decode_position(b'{"seq": "x"}') is None
