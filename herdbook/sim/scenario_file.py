"""Reading the scenario file of `herd sim`. A bad file is refused with one line: the
file, the key path and the reason (``ScenarioError``), before anything starts; what
msgspec cannot check (``validate``) is checked after decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import msgspec.yaml

from herdbook.config import ConfigError, parse_config
from herdbook.durations import Duration, parse_duration
from herdbook.events.decode_errors import error_path
from herdbook.events.faults import FAULTS, fault_named
from herdbook.events.subjects import ID_PATTERN
from herdbook.sim.scenario import (
    ACTIONS,
    CONDITION_KEYS,
    EXPECTS,
    MAX_AGENTS,
    ApiCall,
    Check,
    Inject,
    NodeAction,
    NodeMatch,
    Scenario,
    ScenarioStep,
    group_ids,
)


class ScenarioError(ValueError):
    """A scenario that cannot run: ``<file>: <key path>: <reason>``."""


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ is Duration:
        return parse_duration(obj)
    raise NotImplementedError(f"cannot decode {typ}")


def load_scenario(path: str | Path) -> Scenario:
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ScenarioError(f"{path}: {err.strerror}") from err
    return parse_scenario(raw, str(path))


def parse_scenario(raw: bytes | str, source: str = "scenario") -> Scenario:
    try:
        document = msgspec.yaml.decode(raw or b"{}")
        if not isinstance(document, dict):
            raise ScenarioError(f"{source}: (top level): expected a mapping with name, fleet "
                                "and timeline")
        scenario = msgspec.convert(document, Scenario, dec_hook=_dec_hook)
    except msgspec.ValidationError as err:
        raise ScenarioError(f"{source}: {error_path(str(err))}") from err
    except msgspec.DecodeError as err:
        raise ScenarioError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from err
    problem = validate(scenario)
    if problem is not None:
        raise ScenarioError(f"{source}: {problem}")
    return scenario


def sim_config_text(overrides: dict[str, Any], base: dict[str, Any]) -> bytes:
    """The herd config of a run: ``base`` (ports, data dir) under the scenario's
    ``overrides``; JSON is YAML, so ``parse_config`` reads it."""
    return msgspec.json.encode(deep_merge(overrides, base))


def deep_merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` wins; nested mappings are merged key by key."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def validate(scenario: Scenario) -> str | None:
    """What msgspec cannot check: the key path and the reason of the first problem."""
    try:
        parse_config(sim_config_text(scenario.config, {}), "config")
    except ConfigError as err:
        return "config." + str(err).removeprefix("config: ")
    seen: set[str] = set()
    for g, group in enumerate(scenario.fleet):
        where = f"fleet[{g}]"
        if not 1 <= group.count <= 100_000:
            return f"{where}.count: must be between 1 and 100000"
        if not ID_PATTERN.fullmatch(f"{group.prefix}-1"):
            return f"{where}.prefix: {group.prefix!r} is not an id prefix (A-Z a-z 0-9 _ -)"
        if not 0 <= group.gpus <= 64:
            return f"{where}.gpus: must be between 0 and 64"
        if group.heartbeat_interval <= 0 or group.health_interval <= 0:
            return f"{where}: intervals must be positive"
        for node_id in group_ids(group):
            if node_id in seen:
                return f"{where}: node {node_id} is already in the fleet"
            seen.add(node_id)
    agents = sum(g.count for g in scenario.fleet if not g.lightweight)
    if agents > MAX_AGENTS:
        return (f"fleet: {agents} real agents; at most {MAX_AGENTS} per run (they share one "
                "event loop): use lightweight: true for large fleets")
    if not scenario.timeline:
        return "timeline: no steps"
    for i, step in enumerate(scenario.timeline):
        problem = _validate_step(step, seen)
        if problem is not None:
            return f"timeline[{i}]{problem}"
    return None


def _validate_step(step: ScenarioStep, fleet: set[str]) -> str | None:
    actions = step._set()
    if len(actions) != 1:
        found = ", ".join(name for name, _ in actions) or "none"
        return f": a step has exactly one of {', '.join(ACTIONS)} (found: {found})"
    name, value = actions[0]
    where = f".{name}"
    match value:
        case Check():
            problem = _validate_check(value, name)
            return None if problem is None else where + problem
        case Inject(node=node, pool=pool, fault=fault, value=number):
            try:
                fault = fault_named(fault)   # either spelling (events.faults)
            except ValueError:
                return f"{where}.fault: {fault!r} is not one of {', '.join(FAULTS)}"
            if fault == "xid" and number is None:
                return f"{where}.value: xid needs a code, e.g. 79"
            if (node is None) == (pool is None):
                return f"{where}: give node or pool (one of them)"
            if node is not None and node not in fleet:
                return f"{where}.node: {node} is not a fleet node"
        case NodeAction():
            for node in value.node_ids():
                if node not in fleet:
                    return f"{where}.node: {node} is not a fleet node"
        case ApiCall(route=route, expect=expect):
            if not route or any(not part for part in route.split(".")):
                return f"{where}.route: {route!r} is not an API route like node.cordon"
            if expect not in EXPECTS:
                return f"{where}.expect: {expect!r} is not one of {', '.join(EXPECTS)}"
    return None


def _validate_check(check: Check, action: str) -> str | None:
    if check.timeout is not None and action != "wait_for":
        return ".timeout: only wait_for waits (use wait_for instead of assert)"
    numbers = [n for n in (check.equals, check.at_least, check.at_most) if n is not None]
    if check.counting():
        if check.count is not None and check.instances is not None:
            return ": count or instances, not both"
        if check.selects() or _conditions(check):
            return ": with count/instances, put the node keys inside count"
        if not numbers:
            return ": count/instances needs equals, at_least or at_most"
        return None
    if numbers:
        return ": equals/at_least/at_most go with count or instances"
    if not check.selects():
        return ": select nodes with node, nodes, prefix, pool or labels (or use count)"
    if isinstance(check.nodes, str) and check.nodes != "all":
        return f".nodes: {check.nodes!r}: write all or a list of node ids"
    if not _conditions(check):
        return ": nothing to check (e.g. state: READY)"
    return None


def _conditions(match: NodeMatch) -> bool:
    return any(getattr(match, key) is not None for key in CONDITION_KEYS) or bool(match.fields)
