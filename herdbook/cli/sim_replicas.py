"""`herd sim --replicas N --lightweight`: liveness shards across real `herd up` replicas,
one of them killed with SIGKILL (``sim/replicas.py``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

import typer

from herdbook.cli import client
from herdbook.cli.output import console


def run(replicas: int, shards: int, nodes: int, lightweight: bool, timeout: float,
        measure: float, data_dir: Path | None, report: Path | None, quiet: bool) -> None:
    from herdbook.signals import until_signalled
    from herdbook.sim.replicas import ReplicaOptions, run_replicas
    if not lightweight:
        raise client.fail("--replicas runs lightweight nodes only: add --lightweight",
                          client.EXIT_USAGE)
    if not 2 <= replicas <= 8 or not replicas <= shards <= 1024:
        raise client.fail("--replicas: 2 to 8, and --liveness-shards at least as many",
                          client.EXIT_USAGE)
    opts = ReplicaOptions(nodes=nodes, replicas=replicas, shards=shards,
                          heartbeat_timeout=timeout, measure=measure)

    def say(text: str) -> None:
        if not quiet:
            console.print(f"  {text}", markup=False)

    work = data_dir or Path(tempfile.mkdtemp(prefix="herd-sim-replicas-"))
    try:
        result = asyncio.run(until_signalled(run_replicas(opts, work, say)))
    except (RuntimeError, TimeoutError, OSError) as err:
        raise client.fail(f"the replicas did not run: {err}", 3) from None
    finally:
        if data_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if result is None:
        raise client.fail("stopped by a signal", client.EXIT_REFUSED)
    if report is not None:
        report.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    kill = result.kill
    console.print(f"replicas: {nodes:,} lightweight nodes, {replicas} replicas, {shards} "
                  f"shards, heartbeat timeout {timeout:g}s", markup=False)
    for f in result.replicas:
        console.print(f"  {f.name}: shards {f.shards}  {f.heartbeats_per_s:,.0f} "
                      f"heartbeats/s  {f.cpu_per_s:.2f} CPU s/s", markup=False)
    if kill is not None:
        console.print(f"  kill -9 {kill.killed}: shards {kill.shards_taken_over} taken over "
                      f"after {kill.takeover_s:.1f}s; {kill.declared}/{kill.doomed} stopped "
                      f"nodes declared, the last after {kill.latest_declared_s:.1f}s (bound "
                      f"{kill.bound_s:.1f}s); false alarms {len(kill.false_alarms)}",
                      markup=False)
        for alarm in kill.false_alarms[:5]:
            console.print(f"  false alarm: {alarm}", markup=False)
        if not kill.ok:
            client.err_console.print("FAIL replicas: the handover missed, was late or "
                                     "raised a false alarm", markup=False)
            raise typer.Exit(code=1)
