"""Shared setup for the benchmarks: an embedded nats-server on a free port."""

from __future__ import annotations

import platform
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from herdbook.natsd.server import EmbeddedNats


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server() -> tuple[EmbeddedNats, Path]:
    tmp = Path(tempfile.mkdtemp(prefix="herd-bench-"))
    server = EmbeddedNats(tmp / "nats", port=free_port())
    server.start()
    return server, tmp


def stop_server(server: EmbeddedNats, tmp: Path) -> None:
    """Stop the server and delete everything the benchmark created under ``tmp``."""
    try:
        server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def machine() -> str:
    import os
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"


def report(figure: str, value: str, target: str, command: str) -> None:
    print(f"{figure}: {value}   (target {target}; {machine()})")
    print(f"reproduce: {command}")
