"""`herd sim`: run a scenario file against a simulated fleet, or chaos mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.duration_flags import duration_option
from herdbook.cli.output import console
from herdbook.cli.usage import log_level_option

SIM_HELP = """Run a fleet simulation: an embedded nats-server and control plane (temp data
dir), simulated nodes (real in-process agents with fake GPUs, or lightweight ones), and
the SCENARIO.yaml timeline: wait_for, assert, inject (a GPU fault, as `herd agent
inject` names it), stop/start, partition/recover, command (any API route),
wait. Exit 0: every step passed; 1: a step failed (printed as `step N (action): expected
...; found ...`); 2: bad scenario file or options; 3: the simulation did not start.

Chaos mode (--chaos, no SCENARIO): --nodes N nodes, random failures at --rate per 1000
nodes per minute for --duration, kinds weighted by --mix; prints the seed, the
failures injected and the detection latency (injection -> DEGRADED/DOWN/UNHEALTHY in
the view) p50/p99/max. Exit 1 if a failure went undetected or a false alarm fired.
SCENARIO is a file, or the name of a scenario shipped with herdbook (e.g. `herd sim
gpu-failure`; docs/simulator.md lists them)."""


def _write_report(path: Path | None, report: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    except OSError as err:
        raise client.fail(f"cannot write --report {path}: {err.strerror}", client.EXIT_USAGE) from None


def sim_command(
    scenario: Annotated[Path | None, typer.Argument(
        help="Scenario YAML file (name, config, fleet, timeline), or the name of a "
             "bundled one (gpu-failure, cordon-drain, ...).", show_default=False)] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Write a JSON report: steps with status and timings, asserts, "
                         "injections, detections.")] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed of everything random (printed; default: a new one).")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Keep the run's NATS store and view here (new or empty); "
                           "default: a temp dir, removed.")] = None,
    chaos: Annotated[bool, typer.Option("--chaos", help="Chaos mode instead of a "
                                                        "scenario.")] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=1_000_000,
                                       help="Chaos, --replicas: fleet size.")] = 100,
    rate: Annotated[float, typer.Option("--rate", min=0.0, help="Chaos: failures per 1000 "
                                        "nodes per minute.")] = 60.0,
    duration: Annotated[float, duration_option(
        "--duration", help="Chaos: how long failures are injected.", default="30s",
        positive=True)] = 30.0,
    mix: Annotated[str, typer.Option("--mix", help="Chaos: failure kinds and weights, from "
                                     "xid, ecc_dbe, partition, stop.")] = "xid=0.5,partition=0.3,stop=0.2",
    lightweight: Annotated[bool, typer.Option(
        "--lightweight", help="Chaos: lightweight simulated nodes (one task heartbeats all; "
                              "for thousands) instead of one real agent each.")] = False,
    heartbeat_interval: Annotated[float, duration_option(
        "--heartbeat-interval", help="Chaos: the nodes' heartbeat interval.",
        default="500ms", positive=True)] = 0.5,
    heartbeat_timeout: Annotated[float, duration_option(
        "--heartbeat-timeout", help="Chaos: lifecycle.heartbeat_timeout (and the grace "
        "period).", default="2s", positive=True)] = 2.0,
    replicas: Annotated[int, typer.Option(
        "--replicas", min=0, max=8, help="Liveness shards: this many `herd up` replicas "
        "share the lightweight nodes' heartbeats; one is then killed with SIGKILL (0: "
        "off).")] = 0,
    liveness_shards: Annotated[int, typer.Option(
        "--liveness-shards", min=0, max=1024, help="With --replicas: the shard count "
        "(default: --replicas).")] = 0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the verdict.")] = False,
    log_level: Annotated[str, log_level_option("Of the simulated control plane and "
                                               "agents: error, warning, info.")] = "error",
) -> None:
    import asyncio
    import random

    from herdbook.cli.usage import usable_dir, writable_file
    if data_dir is not None:
        usable_dir(data_dir, "--data-dir")
    if report is not None:
        writable_file(report, "--report")
    from herdbook.logs import setup_logging
    setup_logging(log_level)
    if replicas:
        from herdbook.cli import sim_replicas
        sim_replicas.run(replicas, liveness_shards or replicas, nodes, lightweight,
                         heartbeat_timeout, duration, data_dir, report, quiet)
        return
    if chaos:
        if scenario is not None:
            raise client.fail("--chaos takes no SCENARIO", client.EXIT_USAGE)
        seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        _chaos(nodes, rate, duration, mix, seed, lightweight, heartbeat_interval,
               heartbeat_timeout, data_dir, report, quiet)
        return
    if scenario is None:
        raise client.fail("give a SCENARIO.yaml (or --chaos); see herd sim --help",
                          client.EXIT_USAGE)
    from herdbook.signals import until_signalled
    from herdbook.sim.scenario_file import ScenarioError, load_scenario
    from herdbook.sim.scenario_run import StepResult, run_scenario
    from herdbook.sim.scenarios import bundled, find
    from herdbook.sim.world import DataDirError
    scenario = find(scenario)
    if not scenario.exists():
        raise client.fail(f"{scenario}: No such file, nor a scenario shipped with herdbook "
                          f"({', '.join(bundled())})", client.EXIT_USAGE)
    try:
        loaded = load_scenario(scenario)
    except ScenarioError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if seed is None:
        seed = loaded.seed if loaded.seed is not None else random.SystemRandom().randrange(2**31)

    def on_step(step: StepResult) -> None:
        if quiet:
            return
        mark = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]"}.get(step.status, step.status)
        console.print(f"  {step.step:>3} {mark} {step.action:<9} "
                      f"[dim]{step.started_s:7.2f}s[/] {_escape(step.message)}")

    if not quiet:
        console.print(f"scenario [bold]{_escape(loaded.name)}[/] ({len(loaded.fleet)} fleet "
                      f"group(s), {len(loaded.timeline)} steps, seed {seed})")
    try:
        result = asyncio.run(until_signalled(run_scenario(
            loaded, source=str(scenario), data_dir=data_dir, seed=seed, on_step=on_step)))
    except DataDirError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if result is None:
        raise client.fail("stopped by a signal", client.EXIT_REFUSED)
    _write_report(report, result.report())
    if result.failure is not None:
        client.err_console.print(f"FAIL {loaded.name}: {result.failure}", markup=False)
        raise typer.Exit(code=result.exit_code)
    console.print(f"PASS {_escape(loaded.name)}: {len(result.steps)} steps in "
                  f"{result.duration_s:.1f}s (startup {result.startup_s:.1f}s, seed "
                  f"{result.seed})")


sim_command.__doc__ = SIM_HELP


def _escape(text: str) -> str:
    from rich.markup import escape
    return escape(text)


def _chaos(nodes: int, rate: float, seconds: float, mix: str, seed: int | None,
           lightweight: bool, interval: float, timeout: float,
           data_dir: Path | None, report: Path | None, quiet: bool) -> None:
    import asyncio

    from herdbook.signals import until_signalled
    from herdbook.sim.chaos import ChaosOptions, parse_mix, run_chaos
    from herdbook.sim.world import DataDirError
    try:
        weights = parse_mix(mix)
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    from herdbook.sim.scenario import MAX_AGENTS
    if not lightweight and nodes > MAX_AGENTS:
        raise client.fail(f"--nodes {nodes}: at most {MAX_AGENTS} real agents per run (they "
                          "share one event loop); add --lightweight", client.EXIT_USAGE)
    if interval <= 0 or timeout <= interval:
        raise client.fail("--heartbeat-timeout must be longer than a positive "
                          "--heartbeat-interval", client.EXIT_USAGE)
    options = ChaosOptions(nodes=nodes, rate=rate, duration=seconds, mix=weights, seed=seed,
                           lightweight=lightweight, heartbeat_interval=interval,
                           heartbeat_timeout=timeout, grace_period=timeout)

    def say(text: str) -> None:
        if not quiet:
            console.print(f"  {_escape(text)}")

    if not quiet:
        console.print(f"seed {seed}")

    try:
        result = asyncio.run(until_signalled(run_chaos(options, data_dir=data_dir,
                                                       on_event=say)))
    except DataDirError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    if result is None:
        raise client.fail("stopped by a signal", client.EXIT_REFUSED)
    _write_report(report, result.report())
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(result.injected.items())) or "none"
    total = sum(result.injected.values())
    console.print(f"chaos: {nodes} {'lightweight ' if lightweight else ''}nodes, rate "
                  f"{rate:g}/1000 nodes/min, {seconds:g}s, mix {mix}, seed {result.seed}")
    if result.failure is not None and not result.injected and not result.detections:
        client.err_console.print(f"FAIL chaos: {result.failure}", markup=False)
        raise typer.Exit(code=result.exit_code)
    console.print(f"  injected {total}: {kinds}")
    console.print(f"  detected {result.detected}/{total}; missed {len(result.missed)}; "
                  f"false alarms {len(result.false_alarms)}")
    console.print(f"  latency injection -> DEGRADED/DOWN/UNHEALTHY in the view: "
                  f"{_latency(result.latency)}")
    for kind, figures in sorted(result.latency_by_kind.items()):
        console.print(f"    {kind:<9} {_latency(figures)}")
    for missed in result.missed[:5]:
        console.print(f"  missed: {missed['kind']} on {missed['node']} at {missed['at_s']:.2f}s")
    for alarm in result.control_plane_alarms[:5]:
        console.print(f"  the control plane's own node: {alarm['event']} at {alarm['at_s']:.2f}s "
                      f"({_escape(alarm['reason'])}; it shares the simulation's event loop, "
                      "see the loop lag)")
    for alarm in result.false_alarms[:5]:
        console.print(f"  false alarm: {alarm['event']} on {alarm['node']} at {alarm['at_s']:.2f}s: "
                      f"{_escape(alarm['reason'])}")
    console.print(f"  startup {result.startup_s:.1f}s, fleet READY in {result.ready_s:.1f}s, "
                  f"run {result.duration_s:.1f}s; event loop lag {_latency(result.loop_lag)}")
    if result.failure is not None:
        client.err_console.print(f"FAIL chaos: {result.failure}", markup=False)
        raise typer.Exit(code=result.exit_code)


def _latency(figures: dict[str, Any]) -> str:
    if not figures.get("n"):
        return "n 0"
    return (f"n {figures['n']}  p50 {figures['p50']:.3f}s  p99 {figures['p99']:.3f}s  "
            f"max {figures['max']:.3f}s")
