"""Shared helpers: the compiled cut, a free port, whether a process runs, the real `herd`
CLI, waits. The fixtures that start a nats-server live in ``tests/servers.py``, for the
integration and e2e tests only (``tests/unit/test_layout_rules.py``: a unit test starts no
server and no process)."""

from __future__ import annotations

import asyncio
import inspect
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

# The suite reads no operator's files: `herd up` searches ./herd.yaml only (not
# /etc/herd/herd.yaml), and the CLI's contexts file is one no test writes unless it says
# so. Set before any test, so every `herd` process a test starts inherits them.
os.environ.setdefault("HERD_CONFIG_PATH", "./herd.yaml")
os.environ.setdefault("HERD_CLI_CONFIG", os.path.join(os.path.dirname(__file__),
                                                      ".no-such-dir", "cli.yaml"))
os.environ.pop("HERD_CONTEXT", None)

ROOT = Path(__file__).resolve().parent.parent


def _build_compiled_cut() -> tuple[str, bool] | None:
    """The tests import herdbook from this tree, not from where ``pip install .`` put it,
    so the optional compiled frame cut (herdbook/events/_frames.c) is built here, in
    place, where a C compiler and Python's headers are at hand (a second or two, once).
    None once it is there; else why not, and whether that is a failure (a compiler was
    there and the build failed: never a skip)."""
    built = ROOT / "herdbook" / "events"
    if any(built.glob("_frames.*.so")):
        return None
    compiler = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None or not (
            Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return (f"the optional compiled cut is not built: no C compiler ({compiler}) or no "
                "Python headers here; the Python cut runs instead", False)
    try:
        done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120,
                              check=False)
        output = (done.stdout + done.stderr).strip()[-2000:]
    except (OSError, subprocess.SubprocessError) as err:
        output = str(err)
    if any(built.glob("_frames.*.so")):
        return None
    return f"building herdbook/events/_frames.c with {compiler} failed:\n{output}", True


COMPILED_CUT_MISSING = _build_compiled_cut()


def compiled_cut() -> None:
    """For a test of the compiled cut: skip where it cannot be built here, fail where the
    build failed."""
    if COMPILED_CUT_MISSING is not None:
        why, failed = COMPILED_CUT_MISSING
        if failed:
            pytest.fail(why)
        pytest.skip(why, allow_module_level=True)




def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: a zombie (exited, not reaped yet) does not."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


HERD = [sys.executable, "-m", "herdbook.cli"]


def herd(*args: str, server: str | None = None, timeout: float = 30.0,
         check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `herd` CLI in a subprocess."""
    cmd = [*HERD, *(["--server", server] if server else []), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "COLUMNS": "200"})
    if check and result.returncode != 0:
        raise AssertionError(f"{cmd} failed ({result.returncode}): {result.stderr}")
    return result


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.1, what: str = ""):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}: {last!r}")


async def poll(predicate, timeout: float = 20.0, what: str = "", *,  # type: ignore[no-untyped-def]
               interval: float = 0.05, ignoring: tuple[type[BaseException], ...] = ()):
    """``predicate()``'s first truthy result (awaited, where it is awaitable), asked every
    ``interval`` seconds on the event loop; an exception in ``ignoring`` counts as "not
    yet", and the last one is the timeout's cause. The one async wait of the tests: the
    modules' own ``eventually``/``until`` only set other defaults."""
    deadline = time.monotonic() + timeout
    error: BaseException | None = None
    while True:
        try:
            result = predicate()
            if inspect.isawaitable(result):
                result = await result
        except ignoring as err:
            result, error = None, err
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}"
                                 ) from error
        await asyncio.sleep(interval)


async def settle(nc, stream: str = "HERD_EVENTS") -> int:  # type: ignore[no-untyped-def]
    """The stream's last sequence once it stops growing (what was published is stored)."""
    from herdbook.events.store import stream_last_seq

    last, previous = 0, -1
    while last != previous:
        previous = last
        await asyncio.sleep(0.3)
        last = await stream_last_seq(nc.jetstream(), stream)
    return last
