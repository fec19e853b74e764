"""Agent RSS and CPU at the default 10 s heartbeat interval (a real `herd agent`)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from benchmarks.common import cpu_seconds, report, rss_mb, start_server, stop_server


def main(seconds: float, gpus: int) -> None:
    server, tmp = start_server()
    try:
        subprocess.run([sys.executable, "-c", (
            "import asyncio, nats\n"
            "from herdbook.control.nats_parts import ensure_streams\n"
            "async def m():\n"
            f"    nc = await nats.connect('{server.url}')\n"
            "    await ensure_streams(nc, 1, 3600.0)\n"
            "    await nc.close()\n"
            "asyncio.run(m())")], check=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "herdbook.cli", "--server", server.url, "agent", "--node-id",
             "bench", "--state-dir", str(tmp / "agent"), "--fake-gpus", str(gpus),
             "--log-level", "warning"])
        time.sleep(5)   # start-up and registration are not the steady state
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(seconds)
        cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
        rss = rss_mb(proc.pid)
        proc.terminate()
        proc.wait(10)
        report("agent footprint", f"{rss:.1f} MB RSS, {cpu:.2%} CPU ({gpus} fake GPUs)",
               "<= 50 MB RSS, <= 1% CPU at 10s interval",
               f"python -m benchmarks.agent_footprint --seconds {seconds:g}")
    finally:
        stop_server(server, tmp)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    main(args.seconds, args.gpus)
