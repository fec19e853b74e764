"""CEL health policies (Navarch): rules of ``name``, ``condition``, ``result``; the first
matching rule classifies an event; the worst result across a report's events and
checks is the report's. Pure apart from compiling CEL."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import msgspec.yaml

from herdbook.events.health_report import CheckResult, GpuEvent, HealthReport

RESULTS = ("healthy", "degraded", "unhealthy", "fatal")
_RANK = {result: rank for rank, result in enumerate(RESULTS)}

DEFAULT_POLICY_YAML = """\
version: 1
rules:
  - name: fatal-xid
    condition: event.kind == "xid" && event.xid == 79
    result: fatal
  - name: ecc-double-bit
    condition: event.kind == "ecc_dbe"
    result: fatal
  - name: critical-xid
    condition: event.kind == "xid" && event.xid in [43, 48, 63]
    result: unhealthy
  - name: recoverable-xid
    condition: event.kind == "xid" && event.xid in [13, 31, 45, 64, 92, 94]
    result: degraded
  - name: thermal-critical
    condition: event.kind == "thermal" && event.value >= 95.0
    result: unhealthy
  - name: thermal-warning
    condition: event.kind == "thermal" && event.value >= 85.0
    result: degraded
  - name: nvlink-errors
    condition: event.kind == "nvlink"
    result: degraded
  - name: pcie-errors
    condition: event.kind == "pcie"
    result: degraded
  - name: failed-check
    condition: event.kind == "check" && event.status == "unhealthy"
    result: unhealthy
  - name: warning-check
    condition: event.kind == "check" && event.status == "degraded"
    result: degraded
"""


class Rule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    condition: str
    result: str


class PolicyFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    rules: list[Rule]


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class CompiledRule:
    name: str
    result: str
    program: Any


@dataclass(frozen=True)
class Verdict:
    result: str                 # healthy | degraded | unhealthy | fatal
    reasons: tuple[str, ...]    # "rule-name: what matched", worst first

    @property
    def fatal(self) -> bool:
        return self.result == "fatal"


class Policy:
    def __init__(self, rules: list[CompiledRule]) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str | bytes, source: str = "policy") -> Policy:
        import cel
        try:
            raw = msgspec.yaml.decode(text, type=PolicyFile)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            raise PolicyError(f"{source}: {err}") from err
        if raw.version != 1:
            raise PolicyError(f"{source}: version {raw.version} is not supported (use 1)")
        compiled = []
        for rule in raw.rules:
            if rule.result not in RESULTS:
                raise PolicyError(f"{source}: rule {rule.name!r}: result {rule.result!r} is "
                                  f"not one of {', '.join(RESULTS)}")
            try:
                program = cel.compile(rule.condition)
            except ValueError as err:
                detail = " ".join(str(err).split())
                raise PolicyError(f"{source}: rule {rule.name!r}: {detail}") from err
            compiled.append(CompiledRule(rule.name, rule.result, program))
        return cls(compiled)

    @classmethod
    def load(cls, path: str | Path | None) -> Policy:
        if path is None:
            return cls.parse(DEFAULT_POLICY_YAML, "default policy")
        try:
            text = Path(path).read_bytes()
        except OSError as err:
            raise PolicyError(f"{path}: {err.strerror}") from err
        return cls.parse(text, str(path))

    def classify_event(self, event: dict[str, Any]) -> tuple[str, str]:
        """(result, rule name) of the first matching rule; healthy if none matches. A rule
        that fails at runtime (e.g. a missing field) does not match."""
        for rule in self.rules:
            try:
                matched = rule.program.execute({"event": event})
            except Exception:  # noqa: BLE001 - a rule that cannot apply does not match
                continue
            if matched is True:
                return rule.result, rule.name
        return "healthy", ""

    def classify(self, report: HealthReport) -> Verdict:
        worst = "healthy"
        reasons: list[tuple[int, str]] = []
        items: list[GpuEvent | CheckResult] = [*report.events, *report.checks]
        for item in items:
            result, rule = self.classify_event(_as_cel(item))
            if result != "healthy":
                reasons.append((_RANK[result], f"{rule}: {_describe(item)}"))
            if _RANK[result] > _RANK[worst]:
                worst = result
        reasons.sort(key=lambda r: -r[0])
        return Verdict(worst, tuple(reason for _, reason in reasons))


def _as_cel(item: GpuEvent | CheckResult) -> dict[str, Any]:
    if isinstance(item, GpuEvent):
        return {"kind": item.kind, "gpu": item.gpu, "xid": item.xid, "value": float(item.value),
                "message": item.message}
    return {"kind": "check", "name": item.name, "status": item.status,
            "message": item.message}


def _describe(item: GpuEvent | CheckResult) -> str:
    if isinstance(item, CheckResult):
        return f"{item.name} check {item.status}" + (f" ({item.message})" if item.message else "")
    what = {"xid": f"XID {item.xid}", "thermal": f"{item.value:g}°C"}.get(
        item.kind, f"{item.kind} {item.value:g}")
    return f"{what} on GPU {item.gpu}" if item.gpu >= 0 else what
