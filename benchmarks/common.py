"""Shared setup for the benchmarks: an embedded nats-server on a free port."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

from herdbook.natsd.embedded import EmbeddedNats


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


def spread(values: list[float]) -> tuple[float, str]:
    """The median, and it written with the range of the rounds ("12,300 (11,900–13,000)")."""
    mid = statistics.median(values)
    return mid, f"{mid:,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"


def report(figure: str, value: str, target: str, command: str) -> None:
    print(f"{figure}: {value}   (target {target}; {machine()})")
    print(f"reproduce: {command}")


def sizes_arg(text: str) -> list[int]:
    """``--sizes 10000,50000,100000``: positive counts, for argparse's ``type=``."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of counts: {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"counts must be positive: {text!r}")
    return sizes
