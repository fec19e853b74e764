"""Which nats-server processes are this store's: the one its pid file names, or any
found in /proc running with its config. Only those are ever signalled: a server of
another store, or a process that is not nats-server, is left alone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

PID_FILE = "nats-server.pid"


def leftover_servers(conf: Path) -> list[int]:
    """Pids of nats-server processes running with ``conf``: the one the pid file next to
    it names, then any other found in /proc (a pid file lost or written by an older
    herdbook). Linux only; elsewhere none are found."""
    found: list[int] = []
    try:
        found.append(int((conf.parent / PID_FILE).read_text().strip()))
    except (OSError, ValueError):
        pass
    try:
        found += [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    except OSError:
        pass
    seen: set[int] = set()
    pids = []
    for pid in found:
        if pid in seen or pid <= 1 or pid == os.getpid():
            continue
        seen.add(pid)
        if runs_config(pid, conf):
            pids.append(pid)
    return pids


def runs_config(pid: int, conf: Path) -> bool:
    """Whether process ``pid`` is nats-server started with ``-c conf``."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if not argv or Path(os.fsdecode(argv[0])).name != "nats-server":
        return False
    want = conf.resolve()
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag not in (b"-c", b"--config", b"-config"):
            continue
        path = Path(os.fsdecode(value))
        if not path.is_absolute():
            try:
                path = Path(os.readlink(f"/proc/{pid}/cwd")) / path
            except OSError:
                continue
        if path.resolve() == want:
            return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    except (OSError, IndexError):
        return True
    return state != "Z"     # a zombie holds no port; its parent (gone) never reaps it


def stop_pid(pid: int, conf: Path, timeout: float = 10.0) -> None:
    """SIGTERM the nats-server ``pid`` runs with ``conf``, SIGKILL after ``timeout``;
    wait until it is gone. Checked again before each signal: a pid is reused."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if not runs_config(pid, conf):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)
