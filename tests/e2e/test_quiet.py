"""Quiet when nothing is wrong (issue 16): a real `herd up` started, answering, and
stopped with SIGTERM logs nothing at WARNING or ERROR, and exits 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, herd, wait_until

pytestmark = pytest.mark.e2e


def test_a_normal_start_and_clean_stop_warn_about_nothing(tmp_path: Path) -> None:
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    with open(tmp_path / "stdout", "wb") as out, open(tmp_path / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "herdbook.cli", "up", "--data-dir",
                                 str(tmp_path / "data"), "--nats-port", str(port)],
                                stdout=out, stderr=err, start_new_session=True)
    try:
        wait_until(lambda: herd("status", server=url).returncode == 0, timeout=30,
                   what="herd up answering")
        wait_until(lambda: "is the leader" in (tmp_path / "stderr").read_text(),
                   timeout=30, what="the leader elected")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = (tmp_path / "stderr").read_text()
    loud = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line
            or "Traceback" in line]
    assert loud == [], log
    assert "no longer the leader: stopping" in log    # said, at info level
