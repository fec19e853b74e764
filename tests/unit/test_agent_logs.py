"""`herd alloc logs`'s agent half, pure over a file: a tail of N lines, a follow from an
offset, and never more than the byte cap per reply (issue 31 item 2)."""

from __future__ import annotations

from pathlib import Path

from herdbook.agent.workload_logs import read_log


def test_a_tail_is_the_last_lines_and_says_there_is_more_before(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"one\ntwo\nthree\n")
    piece = read_log(log, None, 2, 1024)
    assert (piece.data, piece.offset, piece.next_offset, piece.size, piece.truncated) == (
        b"two\nthree\n", 4, 14, 14, True)
    assert read_log(log, None, 10, 1024).data == b"one\ntwo\nthree\n"
    assert read_log(log, None, 0, 1024).data == b""
    log.write_bytes(b"one\ntwo")     # a last line still being written
    assert read_log(log, None, 1, 1024).data == b"two"


def test_a_huge_log_is_read_a_capped_piece_at_a_time(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    line = b"x" * 99 + b"\n"
    log.write_bytes(line * 10_000)           # 1 MB
    tail = read_log(log, None, 10_000, 1000)
    assert len(tail.data) == 1000 and tail.data.startswith(b"x") and tail.truncated
    # a window starting mid-line starts at the next whole line
    assert read_log(log, None, 10_000, 1050).data == line * 10
    seen, offset = b"", 0
    while True:
        piece = read_log(log, offset, 0, 4096)
        assert len(piece.data) <= 4096 and piece.data.endswith(b"\n")
        seen += piece.data
        offset = piece.next_offset
        if not piece.truncated:
            break
    assert seen == line * 10_000
    assert read_log(log, 5_000_000, 0, 10).data == b""     # past the end: nothing yet


def test_a_cap_never_cuts_a_utf8_character(tmp_path: Path) -> None:
    log = tmp_path / "u.log"
    log.write_bytes("é€😀".encode() * 3)     # no newline: pieces by character
    offset, text = 0, ""
    while True:
        piece = read_log(log, offset, 0, 5)
        assert 0 < len(piece.data) <= 5
        text += piece.data.decode()       # strict: a cut character would raise
        offset = piece.next_offset
        if not piece.truncated:
            break
    assert text == "é€😀" * 3
