"""Evaluating ``assert`` / ``wait_for`` against node and instance facts. Pure: the facts
come in as mappings (the API's node and instance objects), an ``Outcome`` comes out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from herdbook.events.states import resolve_state_filter
from herdbook.sim.scenario import CONDITION_KEYS, Check, InstanceMatch, NodeMatch

Facts = Mapping[str, Any]
SHOWN = 5


@dataclass(frozen=True)
class Outcome:
    ok: bool
    expected: str
    found: str


def wanted_values(key: str, wanted: Any) -> list[Any]:
    """The accepted values of one condition key (a list: any of them): states through
    their aliases (``active``), the other words upper-cased, booleans as they are."""
    values = wanted if isinstance(wanted, list) else [wanted]
    if key == "state":
        return sorted(resolve_state_filter([str(v) for v in values]))
    return [v.upper() if isinstance(v, str) and key in UPPER_KEYS else v for v in values]


UPPER_KEYS = frozenset({"lifecycle", "health", "intent", "approval"})


def conditions(match: NodeMatch) -> dict[str, Any]:
    """Condition keys first, then ``fields`` (compared as written: a list is a list)."""
    out = {key: getattr(match, key) for key in CONDITION_KEYS if getattr(match, key) is not None}
    out.update({f"fields.{key}": value for key, value in (match.fields or {}).items()})
    return out


def fact(facts: Facts, key: str) -> Any:
    return facts.get(key.removeprefix("fields."))


def matches(facts: Facts, wanted: Mapping[str, Any]) -> bool:
    for key, value in wanted.items():
        if key.startswith("fields."):
            if fact(facts, key) != value:
                return False
        elif facts.get(key) not in wanted_values(key, value):
            return False
    return True


def shown(wanted: Mapping[str, Any]) -> str:
    return " ".join(f"{key.removeprefix('fields.')}={_text(value)}"
                    for key, value in wanted.items())


def found_text(facts: Facts, keys: Iterable[str]) -> str:
    return " ".join(f"{key.removeprefix('fields.')}={_text(fact(facts, key))}" for key in keys)


def _text(value: Any) -> str:
    if isinstance(value, list):
        return "|".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_text(v)}" for k, v in value.items()) + "}"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def select(match: NodeMatch, fleet: list[str], nodes: Mapping[str, Facts]) -> list[str]:
    """Node ids chosen by the selection keys: ``node``/``nodes`` name them (present or
    not), ``prefix``/``pool``/``labels`` filter the nodes in the view plus the fleet."""
    if match.node is not None:
        chosen = [match.node]
    elif match.nodes == "all":
        chosen = list(fleet)
    elif isinstance(match.nodes, list):
        chosen = list(match.nodes)
    else:
        chosen = sorted(set(nodes) | set(fleet))
    out = []
    for node_id in chosen:
        facts = nodes.get(node_id)
        if match.prefix is not None and not node_id.startswith(match.prefix):
            continue
        labels = (facts or {}).get("labels") or {}
        if match.pool is not None and labels.get("pool") != match.pool:
            continue
        if match.labels and any(labels.get(k) != v for k, v in match.labels.items()):
            continue
        out.append(node_id)
    return out


def check_nodes(check: NodeMatch, fleet: list[str], nodes: Mapping[str, Facts]) -> Outcome:
    """Every selected node is in the view and matches every condition."""
    wanted = conditions(check)
    chosen = select(check, fleet, nodes)
    expected = f"{_selection(check)} {shown(wanted)}"
    if not chosen:
        return Outcome(False, expected, "no node selected")
    bad = []
    for node_id in chosen:
        facts = nodes.get(node_id)
        if facts is None:
            bad.append(f"{node_id} not in the view")
        elif not matches(facts, wanted):
            bad.append(f"{node_id} {found_text(facts, wanted)}")
    if not bad:
        return Outcome(True, expected, f"{len(chosen)} node(s) match")
    more = f" (+{len(bad) - SHOWN} more)" if len(bad) > SHOWN else ""
    return Outcome(False, expected, ", ".join(bad[:SHOWN]) + more)


def _selection(match: NodeMatch) -> str:
    if match.node is not None:
        return match.node
    if match.nodes == "all":
        return "every fleet node"
    parts = []
    if isinstance(match.nodes, list):
        parts.append(",".join(match.nodes))
    if match.prefix is not None:
        parts.append(f"{match.prefix}*")
    if match.pool is not None:
        parts.append(f"pool {match.pool}")
    if match.labels:
        parts.append(",".join(f"{k}={v}" for k, v in match.labels.items()))
    return "nodes " + " ".join(parts) if parts else "nodes"


def compare(check: Check, n: int) -> tuple[bool, str]:
    ok = ((check.equals is None or n == check.equals)
          and (check.at_least is None or n >= check.at_least)
          and (check.at_most is None or n <= check.at_most))
    parts = []
    if check.equals is not None:
        parts.append(f"== {check.equals}")
    if check.at_least is not None:
        parts.append(f">= {check.at_least}")
    if check.at_most is not None:
        parts.append(f"<= {check.at_most}")
    return ok, " and ".join(parts)


def check_count(check: Check, fleet: list[str], nodes: Mapping[str, Facts]) -> Outcome:
    """How many nodes in the view the ``count`` keys select and match."""
    assert check.count is not None
    match = check.count
    wanted = conditions(match)
    present = {k: v for k, v in nodes.items() if v is not None}
    chosen = [n for n in select(match, fleet, present) if n in present]
    hits = [n for n in chosen if matches(present[n], wanted)]
    ok, relation = compare(check, len(hits))
    what = " ".join(p for p in (_selection(match) if match.selects() else "nodes",
                                shown(wanted)) if p)
    return Outcome(ok, f"count({what}) {relation}", _listed(len(hits), hits))


def instance_matches(facts: Facts, match: InstanceMatch) -> bool:
    if match.pool is not None and facts.get("pool") != match.pool:
        return False
    if match.node is not None and facts.get("node_id") != match.node:
        return False
    if match.replaces is not None and bool(facts.get("replaces")) != match.replaces:
        return False
    if match.state is not None:
        states = match.state if isinstance(match.state, list) else [match.state]
        if str(facts.get("state")) not in {s.upper() for s in states}:
            return False
    return True


def check_instances(check: Check, instances: Iterable[Facts]) -> Outcome:
    assert check.instances is not None
    match = check.instances
    hits = sorted(str(i.get("id")) for i in instances if instance_matches(i, match))
    ok, relation = compare(check, len(hits))
    keys = {"pool": match.pool, "state": match.state, "node": match.node,
            "replaces": match.replaces}
    what = shown({k: v for k, v in keys.items() if v is not None})
    return Outcome(ok, f"count(instances {what}) {relation}".replace(" )", ")"),
                   _listed(len(hits), hits))


def _listed(n: int, ids: list[str]) -> str:
    if not ids:
        return "0"
    more = ", ..." if len(ids) > SHOWN else ""
    return f"{n} ({', '.join(ids[:SHOWN])}{more})"


def evaluate(check: Check, fleet: list[str], nodes: Mapping[str, Facts],
             instances: Callable[[], Iterable[Facts]]) -> Outcome:
    if check.instances is not None:
        return check_instances(check, instances())
    if check.count is not None:
        return check_count(check, fleet, nodes)
    return check_nodes(check, fleet, nodes)
