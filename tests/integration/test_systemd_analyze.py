"""deploy/systemd/: the shipped units pass `systemd-analyze verify` (run as a process,
so not in tests/unit; what the units say is checked there: tests/unit/test_systemd_units.py,
whose docstring says why the copies verified here name this host's binaries)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.test_systemd_units import INSTALLED, UNITS


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here")
    for path in UNITS.glob("*.service"):
        text = path.read_text()
        for shipped, here in INSTALLED.items():
            text = text.replace(f"ExecStart={shipped} ", f"ExecStart={here} ")
        assert "ExecStart=/usr/local/bin/" not in text, path.name
        (tmp_path / path.name).write_text(text)
    (tmp_path / "herd-nats@n1.service").write_text((tmp_path / "herd-nats@.service").read_text())
    names = ["herd-control.service", "herd-agent.service", "herd-nats@n1.service"]
    done = subprocess.run([analyze, "verify", "--man=no", *names], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), \
        done.stdout + done.stderr
