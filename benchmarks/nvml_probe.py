"""What NVML answers on this node to every call herdbook's agent makes, and what one
telemetry sample and one health report cost, beside the floor of the same NVML calls
made bare (docs/health.md "On a real GPU", docs/gpus.md).

It runs the agent's own code in this process: ``telemetry_sampler.sample`` (what
``herd agent`` publishes every ``--telemetry-interval``) and ``HealthMonitor.report``
(every ``--health-interval``), through a spy that records each NVML function's outcome
(``ok`` or pynvml's ``NVMLError`` code: a GPU that lacks a reading answers
NOT_SUPPORTED, and the sample leaves that field absent). The floor replays exactly the
calls one sample made, with the same arguments, straight into pynvml: what any reader
of those fields pays before building a reading. Wall and CPU time per call are the
mean of ``--rounds`` calls.

    python -m benchmarks.nvml_probe              # this node's NVML (needs a driver)
    python -m benchmarks.nvml_probe --fake-gpus 8  # the agent's fake backend
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from herdbook.agent import fake_nvml, gpu, telemetry_sampler
from herdbook.agent.gpu_checks import HealthMonitor
from herdbook.clock import SYSTEM_CLOCK

AGENT = Path(__file__).resolve().parent.parent / "herdbook" / "agent"


class Spy:
    """``nvml`` with every ``nvml*`` function recorded: its outcome and, for the floor,
    the calls themselves in order."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.outcome: dict[str, str] = {}
        self.calls: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.nvml, name)
        if not (callable(real) and name.startswith("nvml")):
            return real

        def call(*args: Any) -> Any:
            self.calls.append((real, args))
            try:
                value = real(*args)
            except self.nvml.NVMLError as err:
                self.outcome[name] = f"NVMLError {err.value}: {err}"
                raise
            self.outcome.setdefault(name, "ok")
            return value
        return call


def per_call(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call of ``fn``, the mean of ``rounds`` calls."""
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(rounds):
        fn()
    return ((time.perf_counter() - wall) / rounds * 1e3,
            (time.process_time() - cpu) / rounds * 1e3)


def replay(calls: list[tuple[Callable[..., Any], tuple[Any, ...]]],
           error: type[BaseException]) -> None:
    for fn, args in calls:
        try:
            fn(*args)
        except error:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake-gpus", type=int, default=0,
                        help="probe the agent's fake backend with N GPUs instead of NVML")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    nvml: Any = (fake_nvml.FakeNvml(args.fake_gpus) if args.fake_gpus
                 else gpu.real_nvml())
    if nvml is None:
        print("no NVML here: pynvml is missing or no driver answers (try --fake-gpus 8)",
              file=sys.stderr)
        return 1
    named = sorted(set(re.findall(r"\bnvml[A-Z][A-Za-z0-9_]*\(",
                                  "".join(p.read_text() for p in AGENT.glob("*.py")))))
    spy = Spy(nvml)
    telemetry = telemetry_sampler.sample(spy, "probe", "probe", time.time())
    sample_calls = list(spy.calls)
    monitor = HealthMonitor(spy, clock=SYSTEM_CLOCK)
    report = monitor.report("probe", "probe", time.time())
    absent = sorted({f for g in telemetry.gpus for f in type(g).__struct_fields__
                     if getattr(g, f) is None})
    print(json.dumps({
        "driver": telemetry.gpus[0].driver_version if telemetry.gpus else None,
        "gpus": [g.model for g in telemetry.gpus],
        "agent_calls_missing_from_this_nvml": [n[:-1] for n in named
                                               if not hasattr(nvml, n[:-1])],
        "calls": spy.outcome,
        "health_report": [[c.name, c.status, c.message] for c in report.checks],
        "health_events": [str(e) for e in report.events],
        "absent_readings": absent,
    }, indent=1))
    plain = Spy(nvml)
    telemetry_sampler.sample(plain, "probe", "probe", time.time())
    floor = plain.calls
    n = len(telemetry.gpus)
    rows = [("sample (herd agent, --telemetry-interval)",
             lambda: telemetry_sampler.sample(nvml, "p", "p", time.time())),
            ("floor: the same NVML calls, bare", lambda: replay(floor, nvml.NVMLError)),
            ("health report (--health-interval)", lambda: monitor.report("p", "p", time.time()))]
    for label, fn in rows:
        wall, cpu = per_call(fn, args.rounds)
        print(f"{label:45s} {wall:7.3f} ms wall {cpu:7.3f} ms CPU per call, "
              f"{n} GPU(s), {len(sample_calls)} NVML calls a sample, {args.rounds} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
