"""One table per vocabulary (issue 30, docs/architecture.md#vocabularies): every closed
word list is a StrEnum or a Literal defined once, and the rest of herdbook/ names the
type. A second spelling drifts (``critical`` and ``fatal`` were once mixed up; fault
names were hyphenated in one map and underscored in another), so this test reads every
module's syntax tree and refuses:

- a tuple, list, set or ``Literal[...]`` of string constants, or a dict's keys, that spell
  out the whole of a vocabulary outside the module that defines it;
- a string (not a docstring) that lists most of a vocabulary's words (all of a short one,
  more than half of a long one), as a help text or an error message would: those are
  joined from the type;
- a fault name in the hyphenated spelling of before, outside ``events/faults.py``.

A subset with a meaning of its own (``health.fault_hold.COUNTER_LIKE``) is typed with the
vocabulary (``frozenset[HealthEventKind]``), so mypy strict checks its words."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import msgspec
import pytest

from herdbook.events.agent_requests import InjectRequest, decode_request, inject_request_decoder
from herdbook.events.alloc import AllocStatus
from herdbook.events.evals import EvalStatus
from herdbook.events.faults import FAULTS, Fault, fault_named
from herdbook.events.health_report import (
    GPU_HEALTHS,
    HEALTH_EVENT_KINDS,
    VERDICT_LEVELS,
    GpuEvent,
    HealthReport,
)
from herdbook.events.job_events import JobSpecError, parse_job_spec
from herdbook.events.states import (
    STATE_ORDER,
    Approval,
    Health,
    InstanceState,
    Intent,
    Lifecycle,
    NodeClass,
)
from herdbook.health.actions import ACTIONS

PACKAGE = Path(__file__).parents[2] / "herdbook"

# name: (its words, the module that defines them)
VOCABULARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "NodeClass": (tuple(NodeClass), "events/states.py"),
    "Approval": (tuple(Approval), "events/states.py"),
    "Lifecycle": (tuple(Lifecycle), "events/states.py"),
    "Health": (tuple(Health), "events/states.py"),
    "Intent": (tuple(Intent), "events/states.py"),
    "node state": (STATE_ORDER, "events/states.py"),
    "InstanceState": (tuple(InstanceState), "events/states.py"),
    "EvalStatus": (tuple(EvalStatus), "events/evals.py"),
    "AllocStatus": (tuple(AllocStatus), "events/alloc.py"),
    "HealthEventKind": (HEALTH_EVENT_KINDS, "events/health_report.py"),
    "VerdictLevel": (VERDICT_LEVELS, "events/health_report.py"),
    "GpuHealth": (GPU_HEALTHS, "events/health_report.py"),
    "Fault": (FAULTS, "events/faults.py"),
    "Action": (ACTIONS, "health/actions.py"),
}
HYPHENATED_FAULTS = frozenset(f.value.replace("_", "-") for f in Fault if "_" in f.value)


def _strings(nodes: list[ast.expr]) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _spelled_lists(tree: ast.Module) -> list[tuple[int, set[str]]]:
    """Every literal collection of strings in ``tree``, with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            found.append((node.lineno, _strings(node.elts)))
        elif isinstance(node, ast.Dict):
            found.append((node.lineno, _strings([k for k in node.keys if k is not None])))
    return found


def _prose(tree: ast.Module) -> list[tuple[int, str]]:
    """Every string constant that is not a docstring (a bare string statement)."""
    bare = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in bare]


def _listing(words: tuple[str, ...]) -> re.Pattern[str]:
    """Most of ``words`` in a row (all of three, more than half of more), as a help text
    lists them."""
    word = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    least = max(3, len(words) // 2 + 1)
    return re.compile(rf"\b(?:{word})(?:(?:, or |, | or |\|)(?:{word})\b){{{least - 1},}}")


class Module:
    """One module of herdbook/, read once: its literal collections and its strings."""

    def __init__(self, path: Path) -> None:
        tree = ast.parse(path.read_text(), str(path))
        self.name = str(path.relative_to(PACKAGE))
        self.lists = [(line, strings) for line, strings in _spelled_lists(tree) if strings]
        self.prose = _prose(tree)


MODULES = [Module(path) for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_vocabulary_is_spelled_out_twice() -> None:
    found = []
    for name, (words, home) in VOCABULARIES.items():
        whole = set(words)
        found += [f"{module.name}:{line}: the whole of {name}; use the type ({home})"
                  for module in MODULES if module.name != home
                  for line, strings in module.lists if whole <= strings]
    assert found == []


def test_no_help_text_or_message_lists_a_vocabulary_by_hand() -> None:
    found = []
    for name, (words, home) in VOCABULARIES.items():
        listing = _listing(words)
        found += [f"{module.name}:{line}: lists {name} ({text!r}); join the type's values"
                  for module in MODULES if module.name != home
                  for line, text in module.prose if listing.search(text)]
    assert found == []


def test_the_hyphenated_fault_names_are_read_in_one_place_only() -> None:
    found = [f"{module.name}:{line}: {text!r}" for module in MODULES
             if module.name != "events/faults.py"
             for line, text in module.prose if text in HYPHENATED_FAULTS]
    assert found == []


def test_the_scan_finds_a_second_spelling() -> None:
    # the scan itself: the tuples that issue 30 found, in the shapes they had
    tree = ast.parse('CLASSES = ("standard", "sensitive", "borrowed")\n'
                     'Kind = Literal["healthy", "degraded", "unhealthy", "critical", "fatal"]\n'
                     'HELP = "standard, sensitive or borrowed."\n'
                     'def f():\n    """standard, sensitive or borrowed: a docstring may."""\n')
    assert [line for line, strings in _spelled_lists(tree)
            if set(NodeClass) <= strings or set(VERDICT_LEVELS) <= strings] == [1, 2]
    assert [line for line, text in _prose(tree)
            if _listing(tuple(NodeClass)).search(text)] == [3]


# the types refuse a bad word at decode, in one line ---------------------------------------

def test_a_fault_is_spelled_with_underscores_and_the_old_hyphens_are_read() -> None:
    assert Fault("ecc-dbe") is Fault.ECC_DBE and fault_named("gpu-missing") is Fault.GPU_MISSING
    request = decode_request(inject_request_decoder, b'{"fault": "nvlink-down", "gpu": 1}')
    assert request.fault is Fault.NVLINK_DOWN
    # written with underscores only
    assert msgspec.json.encode(request) == b'{"fault":"nvlink_down","gpu":1,"value":null}'
    with pytest.raises(ValueError, match="unknown fault 'ecc--dbe'; choose from xid, "):
        fault_named("ecc--dbe")
    with pytest.raises(ValueError, match=r"^fault: Invalid enum value 'fire'$"):
        decode_request(inject_request_decoder, b'{"fault": "fire"}')
    assert InjectRequest(fault=Fault.XID).fault == "xid"


def test_every_fault_raises_a_health_event_kind_spelled_the_same() -> None:
    for fault in Fault:
        kind = fault.event_kind
        assert kind is None or kind in HEALTH_EVENT_KINDS, fault
        assert kind is None or kind == fault.value or fault is Fault.GPU_MISSING


def test_a_health_event_of_no_known_kind_is_refused_at_decode() -> None:
    # a hyphenated kind (the inject spelling) is not a health event kind: the classifier
    # dead-letters such a report with this reason instead of classifying a kind it
    # does not know
    report = (b'{"report_id": "r", "node_id": "n", "boot_id": "b", '
              b'"events": [{"kind": "ecc-dbe", "gpu": 0}]}')
    with pytest.raises(msgspec.ValidationError,
                       match=r"Invalid enum value 'ecc-dbe' - at `\$.events\[0\].kind`"):
        msgspec.json.decode(report, type=HealthReport)
    assert msgspec.convert({"kind": "ecc_dbe"}, GpuEvent).kind == "ecc_dbe"


def test_a_job_asking_for_a_class_that_does_not_exist_is_refused_in_one_line() -> None:
    with pytest.raises(JobSpecError) as err:
        parse_job_spec(b"id: j\ncommand: [x]\nconstraints: {class: gold}\n")
    assert "constraints.class: Invalid enum value 'gold'" in str(err.value)
    assert "\n" not in str(err.value)
    spec = parse_job_spec(b"id: j\ncommand: [x]\nconstraints: {class: sensitive}\n")
    assert spec.constraints.node_class is NodeClass.SENSITIVE
