"""Bad input to real `herd` processes: one line on stderr, exit 2, no traceback, nothing
started. The full table runs in-process (tests/unit/test_bad_input.py); these go through
the `herd` entry point, where an uncaught error would print a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import herd

pytestmark = pytest.mark.e2e


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("x\n")
    (tmp_path / "state" / "heartbeat-seq").mkdir(parents=True)
    return tmp_path


CASES = [
    ("up", "--nats-port", "99999"),
    ("up", "--data-dir", "{tmp}/file"),
    ("up", "--data-dir", "{tmp}/file/under"),
    ("agent", "--state-dir", "{tmp}/file"),
    ("agent", "--state-dir", "{tmp}/state"),
    ("agent", "--heartbeat-interval", "0"),
    ("--server", "nats://127.0.0.1:99999", "node", "list"),
    ("--server", "nats://[::1", "node", "list"),   # was urlparse's traceback (node list's fast path)
    ("-s", "not a url", "node", "list"),           # was exit 3, after the 3 s connect timeout
    ("-s", "not a url", "status"),
    ("nodee",),
]


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) for c in CASES])
def test_bad_input_to_a_real_process_is_one_line(here: Path, args: tuple[str, ...]) -> None:
    result = herd(*(a.format(tmp=here) for a in args), timeout=20)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert sorted(p.name for p in here.iterdir()) == ["file", "state"]
