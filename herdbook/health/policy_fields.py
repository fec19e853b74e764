"""The fields a policy rule may name: a rule whose condition reads ``event.temp`` compiles
(CEL checks no types here) but fails at run time on every event, so it never matches and
the node it was written for stays HEALTHY. ``Policy.parse`` refuses it instead, naming
the unknown field and the known ones.

The known fields are taken from what the classifier hands a rule
(``health.navarch.event_fields`` and ``check_fields``, built for every kind of
``GpuEvent``), so they cannot drift from it. The references are found by a scan of the
condition's tokens (string literals skipped): the CEL binding exposes no syntax tree.
``event.x``, ``event["x"]``, ``has(event.x)`` and ``event.metrics.x`` are checked; an
``event`` after a dot (``a.event``) is not the variable. Pure."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from herdbook.events.health_report import HEALTH_EVENT_KINDS, CheckResult, GpuEvent
from herdbook.health.navarch import check_fields, event_fields, metrics

_TOKEN = re.compile(r"""
    (?P<string>[rRbB]{0,2}(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''
                          |"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[uU]?)
  | (?P<space>\s+)
  | (?P<other>.)
""", re.VERBOSE)


@cache
def known_fields(checks: bool) -> tuple[frozenset[str], frozenset[str]]:
    """(the fields of ``event``, the keys of ``event.metrics``) a rule can see: of GPU
    health events of every kind, and of check results where ``checks`` (herdbook's
    format; Navarch's rules see health events only)."""
    events = [GpuEvent(kind=kind) for kind in HEALTH_EVENT_KINDS]
    fields = {key for event in events for key in event_fields(event)}
    keys = {key for event in events for key in metrics(event)}
    if checks:
        fields |= set(check_fields(CheckResult(name="", status="healthy")))
    return frozenset(fields), frozenset(keys)


def _tokens(condition: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(condition):
        kind = match.lastgroup or "other"
        if kind == "space":
            continue
        text = match[0]
        if kind == "string":    # its value, for event["x"]: quotes and a prefix dropped
            body = text.lstrip("rRbB")
            quote = 3 if body[:3] in ('"""', "'''") else 1
            text = body[quote:-quote]
        found.append((kind, text))
    return found


def references(condition: str) -> list[tuple[str, ...]]:
    """The ``event`` paths ``condition`` names, one or two deep (``("metrics", "x")``)."""
    tokens = _tokens(condition)
    paths: list[tuple[str, ...]] = []

    def member(at: int) -> tuple[str | None, int]:
        """The name selected at ``tokens[at]`` (``.x`` or ``["x"]``) and where it ends."""
        if at + 1 < len(tokens) and tokens[at] == ("other", ".") and tokens[at + 1][0] == "name":
            return tokens[at + 1][1], at + 2
        if (at + 2 < len(tokens) and tokens[at] == ("other", "[")
                and tokens[at + 1][0] == "string" and tokens[at + 2] == ("other", "]")):
            return tokens[at + 1][1], at + 3
        return None, at

    for at, token in enumerate(tokens):
        if token != ("name", "event") or (at and tokens[at - 1] == ("other", ".")):
            continue
        field, after = member(at + 1)
        if field is None:
            continue
        key = member(after)[0] if field == "metrics" else None
        paths.append((field,) if key is None else (field, key))
    return paths


def names_history(condition: str) -> bool:
    """Whether ``condition`` calls a ``history.*`` function: its result then depends on
    the node's past, not on the event alone."""
    tokens = _tokens(condition)
    return any(token == ("name", "history") and not (at and tokens[at - 1] == ("other", "."))
               for at, token in enumerate(tokens))


def event_guard(condition: str) -> str | None:
    """For a condition that calls ``history.*``: its leading ``&&`` operands that do not
    (``event.kind == "xid" && … && history.xid_count(…) >= 3`` -> ``event.kind == "xid"
    && …``). Where the guard is false the condition is false whatever the history, so
    the guard's answer on an event can be kept. None where there is none, or the top
    level holds ``||`` or ``?`` (the ``&&`` then may not bind the whole)."""
    parts: list[str] = []
    depth, start, previous = 0, 0, ""
    for match in _TOKEN.finditer(condition):
        text = match[0]
        if match.lastgroup != "other":
            previous = ""
            continue
        depth += (text in "([{") - (text in ")]}")
        if depth == 0 and (text == "?" or (text == "|" and previous == "|")):
            return None
        if depth == 0 and text == "&" and previous == "&":
            parts.append(condition[start:match.start() - 1])
            start, previous = match.end(), ""
            continue
        previous = text
    parts.append(condition[start:])
    guard = []
    for part in parts:
        if names_history(part):
            break
        guard.append(part.strip())
    return " && ".join(guard) if guard and len(guard) < len(parts) else None


def unknown_field(condition: str, checks: bool) -> str | None:
    """Why ``condition`` can never match: the first field it names that no event has,
    with the ones there are; None if every one is known."""
    fields, keys = known_fields(checks)
    for path in references(condition):
        if path[0] not in fields:
            return (f"event.{path[0]} is not a field of an event (it has: "
                    f"{', '.join(sorted(fields))}), so the rule would never match")
        if len(path) == 2 and path[1] not in keys:
            return (f"event.metrics.{path[1]} is not a metric of any event (there are: "
                    f"{', '.join(sorted(keys))}), so the rule would never match")
    return None


def compile_checked(condition: str, *, checks: bool) -> Any:
    """The compiled rule, or ValueError: CEL's for a syntax error, ``unknown_field``'s
    for a field no event has (``checks``: check results are events too)."""
    import cel
    program = cel.compile(condition)
    if (unknown := unknown_field(condition, checks)) is not None:
        raise ValueError(unknown)
    return program
