"""The journalctl kernel-log source (``herdbook.agent.kmsg.JournalSource``) as it runs:
a real subprocess whose lines are read without blocking. Moved from
tests/unit/test_kmsg.py (it starts a process); the parsing is tested there."""

from __future__ import annotations

import time

from herdbook.agent.kmsg import JournalSource, KernelXid, parse_line


def test_journalctl_is_a_subprocess_whose_lines_are_read_without_blocking() -> None:
    source = JournalSource(("sh", "-c", "echo '[ 1.5] h kernel: NVRM: Xid (PCI:0000:3b:00): 79, x';"
                            " exec sleep 30"))
    try:
        deadline = time.monotonic() + 10
        lines: list[str] = []
        while not lines and time.monotonic() < deadline:
            lines = source.read_lines()
            time.sleep(0.02)
        assert [parse_line(line) for line in lines] == [KernelXid("0000:3b:00", 79, "x")]
    finally:
        source.close()
    assert source.process.returncode is not None
