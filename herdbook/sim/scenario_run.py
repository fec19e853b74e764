"""Runs a scenario's timeline against a simulated world and judges it.

Exit codes: 0 every step passed; 1 a step failed (an assert, a wait_for that timed
out, a command answered otherwise than expected, an action that could not be done):
the run stops there; 2 the scenario file is bad; 3 the world could not start.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from herdbook.sim import checks
from herdbook.sim.node_control import SimError
from herdbook.sim.scenario import (
    DEFAULT_WAIT_TIMEOUT,
    ApiCall,
    Check,
    Inject,
    NodeAction,
    Scenario,
    Start,
)
from herdbook.sim.world import World
from herdbook.sim.world_run import run_world

EXIT_OK, EXIT_FAILED, EXIT_BAD_SCENARIO = 0, 1, 2


@dataclass
class StepResult:
    step: int                 # 1-based, as printed
    action: str
    args: Any
    status: str = "skipped"   # ok | failed | skipped
    started_s: float | None = None
    duration_s: float | None = None
    message: str = ""
    expected: str | None = None
    found: str | None = None


@dataclass
class SimResult:
    scenario: str
    source: str
    seed: int
    exit_code: int = EXIT_OK
    failure: str | None = None
    startup_s: float = 0.0
    duration_s: float = 0.0
    steps: list[StepResult] = field(default_factory=list)
    detections: list[dict[str, Any]] = field(default_factory=list)
    injections: list[dict[str, Any]] = field(default_factory=list)
    fleet: dict[str, Any] = field(default_factory=dict)
    control_plane: dict[str, Any] = field(default_factory=dict)
    data_dir: str | None = None
    loop_lag: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.exit_code == EXIT_OK

    def report(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["asserts"] = [{"step": s.step, "action": s.action, "ok": s.status == "ok",
                           "expected": s.expected, "found": s.found,
                           "duration_s": s.duration_s}
                          for s in self.steps if s.action in ("assert", "wait_for")]
        return out


def to_builtins(value: Any) -> Any:
    return msgspec.to_builtins(value, enc_hook=lambda obj: float(obj))


class StepFailed(Exception):
    def __init__(self, message: str, expected: str | None = None,
                 found: str | None = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


def describe(action: str, value: Any) -> str:
    match value:
        case Inject(node=node, pool=pool, fault=fault, value=number, gpu=gpu):
            shown = "" if number is None else f" {number:g}"
            target = node if node is not None else f"a READY node of pool {pool}"
            return f"inject {fault}{shown} into {target} GPU {gpu}"
        case Start(gpus=gpus):
            return f"start {', '.join(value.node_ids())}" + (f" with {gpus} GPUs" if gpus
                                                               is not None else "")
        case NodeAction():
            return f"{action} {', '.join(value.node_ids())}"
        case ApiCall(route=route, expect=expect):
            body = value.request()
            body.pop("actor", None)
            return f"command {route} {body}" + ("" if expect == "ok" else f" (expect {expect})")
        case float():
            return f"wait {value:g}s"
    return action


class ScenarioRun:
    def __init__(self, scenario: Scenario, world: World, rng: random.Random,
                 on_step: Callable[[StepResult], None] | None = None) -> None:
        self.scenario = scenario
        self.world = world
        self.rng = rng
        self.on_step = on_step
        self.started = time.monotonic()

    def poll_interval(self) -> float:
        return 0.05 if len(self.world.fleet_ids) < 500 else 0.25

    async def run(self, results: list[StepResult]) -> StepResult | None:
        """Every step in order; the first that fails ends the run and is returned."""
        self.started = time.monotonic()
        for result, step in zip(results, self.scenario.timeline, strict=True):
            action, value = step.action()
            result.started_s = round(time.monotonic() - self.started, 3)
            began = time.monotonic()
            try:
                result.message = await self.do(action, value, result)
                result.status = "ok"
            except StepFailed as err:
                result.status, result.message = "failed", str(err)
                result.expected, result.found = err.expected, err.found
            except (SimError, TimeoutError) as err:
                result.status, result.message = "failed", f"{describe(action, value)}: {err}"
            result.duration_s = round(time.monotonic() - began, 3)
            if self.on_step is not None:
                self.on_step(result)
            if result.status == "failed":
                return result
        return None

    async def do(self, action: str, value: Any, result: StepResult) -> str:
        world = self.world
        assert world.fleet is not None
        match action, value:
            case "wait", float():
                await asyncio.sleep(value)
                return describe(action, value)
            case "assert", Check():
                outcome = self.evaluate(value)
                result.expected, result.found = outcome.expected, outcome.found
                if not outcome.ok:
                    raise StepFailed(f"expected {outcome.expected}; found {outcome.found}",
                                     outcome.expected, outcome.found)
                return f"{outcome.expected}: {outcome.found}"
            case "wait_for", Check():
                return await self.wait_for(value, result)
            case "inject", Inject(node=node, pool=pool, fault=fault, gpu=gpu, value=number):
                if node is None:
                    node = self.pick(pool or "")
                world.detections.injected(node, f"{fault}{'' if number is None else f' {number:g}'}")
                done = await world.inject(node, fault, gpu, number)
                return f"{node}: {done}"
            case "stop", NodeAction():
                for node in value.node_ids():
                    await world.fleet.get(node).stop()
                    world.detections.injected(node, "stop")
                return describe(action, value)
            case "start", Start(gpus=gpus):
                for node in value.node_ids():
                    await world.fleet.get(node).start(gpus)
                return describe(action, value)
            case "partition", NodeAction():
                for node in value.node_ids():
                    world.fleet.get(node).partition(True)
                    world.detections.injected(node, "partition")
                return describe(action, value)
            case "recover", NodeAction():
                for node in value.node_ids():
                    world.fleet.get(node).partition(False)
                return describe(action, value)
            case "command", ApiCall(route=route, expect=expect):
                return await self.command(route, expect, value)
        raise AssertionError(f"unhandled step {action}")

    def pick(self, pool: str) -> str:
        nodes = self.world.nodes()
        ready = sorted(n for n, facts in nodes.items()
                       if facts["labels"].get("pool") == pool and facts["state"] == "READY")
        if not ready:
            raise SimError(f"pool {pool} has no READY node to inject into")
        return self.rng.choice(ready)

    def evaluate(self, check: Check) -> checks.Outcome:
        return checks.evaluate(check, self.world.fleet_ids, self.world.nodes(),
                               self.world.instances)

    async def wait_for(self, check: Check, result: StepResult) -> str:
        timeout = float(check.timeout) if check.timeout is not None else DEFAULT_WAIT_TIMEOUT
        deadline = time.monotonic() + timeout
        began = time.monotonic()
        while True:
            outcome = self.evaluate(check)
            result.expected, result.found = outcome.expected, outcome.found
            if outcome.ok:
                return f"{outcome.expected} after {time.monotonic() - began:.2f}s"
            if time.monotonic() >= deadline:
                raise StepFailed(f"expected {outcome.expected} within {timeout:g}s; found "
                                 f"{outcome.found}", outcome.expected, outcome.found)
            await asyncio.sleep(self.poll_interval())

    async def command(self, route: str, expect: str, command: ApiCall) -> str:
        import nats.errors
        try:
            reply = await self.world.call(route, command.request())
        except nats.errors.NoRespondersError:
            reply = {"ok": False, "code": "not_found", "error": f"no API route {route}"}
        got = ("unchanged" if reply.get("ok") and reply.get("result", {}).get("unchanged")
               else "ok" if reply.get("ok") else str(reply.get("code", "failed")))
        wanted = expect == got or (expect == "failed" and got != "ok")
        shown = describe("command", command)
        if not wanted:
            detail = "" if reply.get("ok") else f": {reply.get('error')}"
            raise StepFailed(f"{shown}: expected {expect}; found {got}{detail}", expect,
                             f"{got}{detail}")
        if reply.get("ok"):
            return f"{shown}: {got}"
        return f"{shown}: {got} as expected ({reply.get('error')})"


async def run_scenario(scenario: Scenario, *, source: str = "", data_dir: str | Path | None = None,
                       seed: int | None = None,
                       on_step: Callable[[StepResult], None] | None = None,
                       on_started: Callable[[World], None] | None = None) -> SimResult:
    """Start the world, run the timeline, stop everything. Never raises for a failing
    scenario: the result carries the exit code and the first failure."""
    seed = seed if seed is not None else (scenario.seed if scenario.seed is not None
                                          else random.SystemRandom().randrange(2**31))
    result = SimResult(scenario=scenario.name, source=source, seed=seed)
    result.steps = [StepResult(step=i + 1, action=step.action()[0],
                               args=to_builtins(step.action()[1]))
                    for i, step in enumerate(scenario.timeline)]
    # prepare_data_dir keeps a given directory (and its streams, for a look afterwards)
    result.data_dir = None if data_dir is None else str(Path(data_dir))

    async def body(world: World) -> bool:
        if on_started is not None:
            on_started(world)
        run = ScenarioRun(scenario, world, random.Random(seed), on_step)
        failed = await run.run(result.steps)
        if failed is not None:
            result.exit_code = EXIT_FAILED
            result.failure = f"step {failed.step} ({failed.action}): {failed.message}"
        result.detections = [asdict(d) for d in world.detections.detections]
        result.injections = [{"node": i.node, "kind": i.kind, "at_s": round(i.at_s, 4),
                              "detected_s": None if i.detected is None else i.detected.at_s,
                              "latency_s": None if i.detected is None else i.detected.latency_s}
                             for i in world.detections.injections]
        if world.fleet is not None:
            result.fleet = world.fleet.stats()
        return True

    return await run_world(result, scenario.config, scenario.fleet, data_dir, body)
