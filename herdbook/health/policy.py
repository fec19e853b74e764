"""CEL health policies: rules of ``name``, ``condition``, ``result``; the first matching
rule classifies an event; the worst result across a report is the report's. Pure apart
from compiling CEL.

Two file formats, told apart by ``version`` alone:

- ``version: 1`` (an integer): herdbook's. Results ``healthy``, ``degraded``,
  ``unhealthy`` (UNHEALTHY after ``unhealthy_threshold`` reports in a row), ``critical``
  (UNHEALTHY on one report) and ``fatal`` (UNHEALTHY and DOWN on one report). Check
  results go through the rules too (``event.kind == "check"``).
- ``version: v1`` (a string): Navarch's, unchanged. Its ``unhealthy`` acts on one report
  as in Navarch (it is herdbook's ``critical``); herdbook's ``critical`` and ``fatal`` are
  accepted as extensions. Check results are not given to its rules (Navarch's rules see
  health events only): a failed check counts as ``unhealthy`` toward the threshold, a
  degraded one as ``degraded``.

Both formats take ``metadata`` and a ``description`` per rule, and both see the same
``event`` (``health.navarch``).

Both take ``hold`` (a duration, default ``DEFAULT_HOLD``: 10m), per policy and per rule:
how long a counter-like fault (``health.fault_hold.COUNTER_LIKE``) keeps its verdict after its
last occurrence; ``0`` holds nothing. A hold is herdbook's: Navarch has none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import msgspec
import msgspec.yaml

from herdbook.durations import format_duration, parse_duration
from herdbook.events.health_report import (
    VERDICT_LEVELS,
    CheckResult,
    GpuEvent,
    HealthReport,
    VerdictLevel,
)
from herdbook.health.actions import ACTIONS, action_for, worst
from herdbook.health.default_policy import DEFAULT_POLICY_YAML
from herdbook.health.fault_history import NO_HISTORY, FaultHistory, NodeFaults
from herdbook.health.fault_hold import COUNTER_LIKE, DEFAULT_HOLD, Finding, Held
from herdbook.health.navarch import check_fields, describe, event_fields
from herdbook.health.policy_fields import compile_checked, event_guard, names_history
from herdbook.health.rule_answers import RuleAnswers, runs

RESULTS = VERDICT_LEVELS   # least to most severe
_RANK: dict[str, int] = {result: rank for rank, result in enumerate(RESULTS)}
AT_ONCE: tuple[VerdictLevel, ...] = ("critical", "fatal")
"""Results that make a node UNHEALTHY on one report, without waiting for the threshold."""


class PolicyFormat(Enum):
    HERDBOOK = "herdbook"
    NAVARCH = "Navarch"


class Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    condition: str
    result: str
    description: str = ""
    hold: str | float | None = None
    """This rule's hold (``500ms``, ``10m``, seconds), instead of the policy's."""
    action: str | None = None
    """This rule's recommended action (``health.actions.ACTIONS``), instead of the table's."""


class Metadata(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str = ""
    description: str = ""


class PolicyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int | str
    rules: list[Rule]
    metadata: Metadata = msgspec.field(default_factory=Metadata)
    hold: str | float | None = None
    """How long a counter-like fault keeps its verdict after its last occurrence."""


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class CompiledRule:
    name: str
    result: str                 # what it means here (one of RESULTS)
    program: Any
    declared: str = ""          # as written in the file
    hold: float | None = None   # its own hold; None: the policy's
    action: str | None = None   # its own recommended action; None: the table's
    pure: bool = False          # names no history.*: its result is the event's alone
    guard: Any = None           # not pure: its leading operands that are (policy_fields.event_guard)


@dataclass(frozen=True)
class GpuFinding:
    """One health event of a report that names a GPU, as the policy classified it: what
    the GPU's own verdict is made of (``reactors/gpu_health.py``)."""

    gpu: int
    result: str                 # one of RESULTS
    rule: str
    reason: str                 # "rule: what matched"
    kind: str
    xid: int = 0
    action: str = "none"        # its recommended action (``health.actions``)


@dataclass(frozen=True)
class Verdict:
    result: str                 # one of RESULTS
    reasons: tuple[str, ...]    # "rule-name: what matched", worst first
    gpus: tuple[int, ...] = ()  # the GPUs of the events found critical or fatal
    findings: tuple[Finding, ...] = ()
    """This report's counter-like events found worse than healthy, to be held."""
    held: tuple[str, ...] = ()
    """Reasons of earlier reports' faults whose hold is still in effect (the classifier's
    ``FaultHolds``); they keep a DEGRADED node DEGRADED (``reactors/health.py``)."""
    ended: tuple[str, ...] = ()
    """Reasons of holds that ended by this report."""
    gpu_findings: tuple[GpuFinding, ...] = ()
    """This report's health events that name a GPU, classified worse than healthy."""
    holding: tuple[Held, ...] = ()
    """The holds in effect (``held``, with the GPU each is of), set by the classifier."""
    action: str = "none"
    """What to do about it (``health.actions``): the most disruptive recommended action
    of the report's faults found worse than healthy; ``none`` for a healthy report."""

    @property
    def fatal(self) -> bool:
        """UNHEALTHY and DOWN on this one report."""
        return self.result == "fatal"

    @property
    def at_once(self) -> bool:
        """UNHEALTHY on this one report (``critical`` or ``fatal``)."""
        return self.result in AT_ONCE


def detect(version: int | str, source: str) -> PolicyFormat:
    """The format by its ``version``: the integer 1 is herdbook's, ``v1`` Navarch's."""
    if version == 1 and isinstance(version, int):
        return PolicyFormat.HERDBOOK
    if version == "v1":
        return PolicyFormat.NAVARCH
    raise PolicyError(f"{source}: version {version} is not supported (use 1 for herdbook's "
                      "format or v1 for Navarch's)")


def _hold(value: str | float | None, where: str) -> float | None:
    if value is None:
        return None
    try:
        return float(parse_duration(value))
    except ValueError as err:
        raise PolicyError(f"{where}: hold: {err}") from err


def _meaning(result: str, fmt: PolicyFormat) -> str:
    if fmt is PolicyFormat.NAVARCH and result == "unhealthy":
        return "critical"       # Navarch: an unhealthy event makes the node unhealthy
    return result


class Policy:
    def __init__(self, rules: list[CompiledRule], fmt: PolicyFormat = PolicyFormat.HERDBOOK,
                 name: str = "", hold: float = DEFAULT_HOLD) -> None:
        self.rules = rules
        self.format = fmt
        self.name = name
        self.hold = hold
        """Seconds a counter-like fault keeps its verdict after its last occurrence."""
        self._holds = {rule.name: hold if rule.hold is None else rule.hold for rule in rules}
        self._actions = {rule.name: rule.action for rule in rules if rule.action}
        self._answers = RuleAnswers(rules)
        """What the rules answered on check results seen before (``health.rule_answers``)."""

    @classmethod
    def parse(cls, text: str | bytes, source: str = "policy") -> Policy:
        try:
            raw = msgspec.yaml.decode(text, type=PolicyFile)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            raise PolicyError(f"{source}: {' '.join(str(err).split())}") from err
        fmt = detect(raw.version, source)
        hold = _hold(raw.hold, source)
        if fmt is PolicyFormat.NAVARCH and not raw.rules:
            raise PolicyError(f"{source}: a policy needs at least one rule")
        seen: set[str] = set()
        compiled = []
        for index, rule in enumerate(raw.rules):
            where = f"{source}: rule {rule.name!r}"
            if not rule.name.strip():
                raise PolicyError(f"{source}: rule {index + 1}: name is required")
            if rule.name in seen:
                raise PolicyError(f"{where}: duplicate rule name")
            seen.add(rule.name)
            if not rule.condition.strip():
                raise PolicyError(f"{where}: condition is required")
            if rule.result not in RESULTS:
                raise PolicyError(f"{where}: result {rule.result!r} is not one of "
                                  f"{', '.join(RESULTS)}")
            if rule.action is not None and rule.action not in ACTIONS:
                raise PolicyError(f"{where}: action {rule.action!r} is not one of "
                                  f"{', '.join(ACTIONS)}")
            try:
                program = compile_checked(rule.condition, checks=fmt is PolicyFormat.HERDBOOK)
            except ValueError as err:
                raise PolicyError(f"{where}: {' '.join(str(err).split())}") from err
            pure = not names_history(rule.condition)
            guard = None if pure else event_guard(rule.condition)
            compiled.append(CompiledRule(rule.name, _meaning(rule.result, fmt), program,
                                         rule.result, _hold(rule.hold, where), rule.action,
                                         pure, None if guard is None else compile_checked(
                                             guard, checks=fmt is PolicyFormat.HERDBOOK)))
        return cls(compiled, fmt, raw.metadata.name,
                   DEFAULT_HOLD if hold is None else hold)

    @classmethod
    def load(cls, path: str | Path | None) -> Policy:
        if path is None:
            return cls.parse(DEFAULT_POLICY_YAML, "default policy")
        try:
            text = Path(path).read_bytes()
        except OSError as err:
            raise PolicyError(f"{path}: {err.strerror}") from err
        return cls.parse(text, str(path))

    def summary(self) -> str:
        """One line: the format, the name and the rules by result, as written."""
        counts = Counter(rule.declared or rule.result for rule in self.rules)
        by_result = ", ".join(f"{counts[r]} {r}" for r in RESULTS if counts[r])
        version = "v1" if self.format is PolicyFormat.NAVARCH else "1"
        named = f" {self.name!r}" if self.name else ""
        plural = "" if len(self.rules) == 1 else "s"
        return (f"{self.format.value} format (version {version}){named}: "
                f"{len(self.rules)} rule{plural}" + (f" ({by_result})" if by_result else "")
                + f", hold {format_duration(self.hold) if self.hold else 'off'}")

    def classify_event(self, event: dict[str, Any],
                       history: NodeFaults = NO_HISTORY) -> tuple[str, str]:
        """(result, rule name) of the first matching rule; healthy if none matches. A rule
        that fails at runtime (e.g. a missing field) does not match. ``history``: the
        node's fault history, the ``history.*`` functions (``herdbook.health.fault_history``)."""
        import cel
        context = cel.Context({"event": event}, history.functions())
        for rule in self.rules:
            if runs(rule.program, context) is True:
                return rule.result, rule.name
        return "healthy", ""

    def _classify_check(self, check: CheckResult,
                        history: NodeFaults = NO_HISTORY) -> tuple[str, str]:
        """Classified by rule in herdbook's format, the answers kept per check result
        (``health.rule_answers``: the same few results on every report)."""
        if self.format is PolicyFormat.HERDBOOK:
            hit = self._answers.first_match((check.name, check.status, check.message),
                                            lambda: check_fields(check), history)
            return ("healthy", "") if hit is None else (self.rules[hit].result,
                                                        self.rules[hit].name)
        if check.status == "unhealthy":
            return "unhealthy", "failed-check"
        return ("degraded", "warning-check") if check.status == "degraded" else ("healthy", "")

    def classify(self, report: HealthReport, history: NodeFaults = NO_HISTORY) -> Verdict:
        """The report's verdict; ``history`` is its node's (``herdbook.health.fault_history``)."""
        worst_result = "healthy"
        reasons: list[tuple[int, str]] = []
        gpus: list[int] = []
        findings: list[Finding] = []
        per_gpu: list[GpuFinding] = []
        actions: list[str] = []
        items: list[GpuEvent | CheckResult] = [*report.events, *report.checks]
        for item in items:
            if isinstance(item, GpuEvent):
                result, rule = self.classify_event(event_fields(item, report.sent_at), history)
                action = self._actions.get(rule) or action_for(item.kind, item.xid,
                                                               fatal=item.fatal)
                if result in AT_ONCE and item.gpu >= 0 and item.gpu not in gpus:
                    gpus.append(item.gpu)
                if result != "healthy" and item.gpu >= 0:
                    per_gpu.append(GpuFinding(item.gpu, result, rule, f"{rule}: {describe(item)}",
                                              item.kind, item.xid, action))
                if result != "healthy" and item.kind in COUNTER_LIKE:
                    findings.append(Finding(f"{rule}/{item.kind}/{item.gpu}",
                                            f"{rule}: {describe(item)}", result,
                                            self._holds.get(rule, self.hold), item.gpu, rule,
                                            item.kind, item.xid, action))
            else:
                result, rule = self._classify_check(item, history)
                action = self._actions.get(rule) or action_for("check", name=item.name)
            if result != "healthy":
                reasons.append((_RANK[result], f"{rule}: {describe(item)}"))
                actions.append(action)
            if _RANK[result] > _RANK[worst_result]:
                worst_result = result
        reasons.sort(key=lambda r: -r[0])
        return Verdict(worst_result, tuple(reason for _, reason in reasons), tuple(gpus),
                       tuple(f for f in findings if f.hold > 0), gpu_findings=tuple(per_gpu),
                       action=worst(actions))

    def classify_with(self, history: FaultHistory, report: HealthReport,
                      serials: Mapping[int, str], at: float | None = None) -> Verdict:
        """Record the report in ``history``, classify it with its node's history, and
        record the GPUs it found critical or fatal as pulls. ``serials``: GPU index ->
        serial of the node; ``at``: when HERD_HEALTH stored the report."""
        when = history.when(at)
        history.record(report, when)
        verdict = self.classify(report, history.of(report.node_id, serials, when))
        if verdict.at_once:
            for gpu in verdict.gpus:
                if gpu in serials:
                    history.record_pull(serials[gpu], report, when)
        return verdict

    def replay(self, history: FaultHistory, report: HealthReport, serials: Mapping[int, str],
               at: float) -> Verdict | None:
        """A report decided on before a restart: into the history, deciding nothing. Its
        verdict, for the holds it starts (None: no events, nothing to count or hold)."""
        if report.events:       # a report without events adds nothing to count
            return self.classify_with(history, report, serials, at)
        return None
