"""What a policy's rules answered on the check results seen before (issue 32 item 1: the
health classifier's cost at 100k nodes).

Why: every health report carries its checks, and nearly always the same few results
(``gpu healthy``, ``health_events healthy 0 events``); herdbook's format classifies each
by running every rule, a CEL program, on it: 22 programs on every report of every node.
Running a rule costs 0.3-3 µs, but making its CEL context costs ~25 µs (CEL converts the
event's map), twice a report. So, per check result (name, status, message):

- a rule that names no ``history.*`` (``CompiledRule.pure``) answers the same every time:
  its answer is kept;
- a rule that does is false whatever the node's past where its leading event-only
  operands are (``CompiledRule.guard``, ``policy_fields.event_guard``): that is kept
  too; where they hold, the rule runs on every report, with the node's history;
- the CEL context is made once and kept, its ``history.*`` functions reading the node
  now being classified (``HistoryNow``);
- the rules left to look at are listed once they are known, so a healthy check with the
  default policy runs one rule (``gpu-pulled-twice``) and the other checks none.

Kept for at most ``LIMIT`` distinct results (messages may vary), then started again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from herdbook.health.fault_history import NO_HISTORY, NodeFaults

LIMIT = 4096
RUN = "run"
"""A kept answer: the rule's guard held on this check, so it runs on every report."""


class AnsweringRule(Protocol):
    """A compiled rule as ``RuleAnswers`` runs it (``policy.CompiledRule``)."""

    @property
    def program(self) -> Any: ...
    @property
    def pure(self) -> bool: ...
    @property
    def guard(self) -> Any: ...


def runs(program: Any, context: Any) -> Any:
    """What ``program`` answers; None where it cannot apply (a rule that fails at run
    time, e.g. on a missing field, does not match)."""
    try:
        return program.execute(context)
    except Exception:  # noqa: BLE001 - a rule that cannot apply does not match
        return None


class HistoryNow:
    """The node whose fault history the kept CEL contexts' ``history.*`` read."""

    def __init__(self) -> None:
        self.faults = NO_HISTORY

    def functions(self) -> dict[str, Callable[..., int]]:
        def reading(name: str) -> Callable[..., int]:
            return lambda *args: int(getattr(self.faults, name)(*args))
        return {name: reading(name.removeprefix("history.")) for name in NO_HISTORY.functions()}


class _Seen:
    __slots__ = ("context", "known", "left")

    def __init__(self, rules: int) -> None:
        self.known: list[bool | str | None] = [None] * rules
        self.context: Any = None
        self.left: Sequence[int] = range(rules)
        """The rules whose kept answer is not False, in order."""


class RuleAnswers:
    def __init__(self, rules: Sequence[AnsweringRule]) -> None:
        self.rules = rules
        self._seen: dict[tuple[str, str, str], _Seen] = {}
        self._history = HistoryNow()

    def first_match(self, key: tuple[str, str, str], event: Callable[[], dict[str, Any]],
                    history: NodeFaults) -> int | None:
        """The index of the first rule that matches the check result ``key`` (its CEL
        ``event`` made by ``event`` if needed) with ``history``; None: none does."""
        seen = self._seen.get(key)
        if seen is None:
            if len(self._seen) >= LIMIT:
                self._seen.clear()
            seen = self._seen[key] = _Seen(len(self.rules))
        self._history.faults = history
        known, narrowed, hit = seen.known, False, None
        for i in seen.left:
            answer = known[i]
            if answer is None or answer is RUN:
                rule = self.rules[i]
                if seen.context is None:
                    import cel
                    seen.context = cel.Context({"event": event()}, self._history.functions())
                if answer is None and rule.guard is not None:
                    if runs(rule.guard, seen.context) is False:
                        known[i], narrowed = False, True   # false whatever the node's past
                        continue
                    known[i] = RUN
                answer = runs(rule.program, seen.context) is True
                if rule.pure:
                    known[i] = answer
                    narrowed = narrowed or not answer
            if answer is True:
                hit = i
                break
        if narrowed:
            seen.left = [i for i, answer in enumerate(known) if answer is not False]
        return hit
