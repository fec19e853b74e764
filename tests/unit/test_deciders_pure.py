"""Every decider in ``herdbook/`` is pure (docs/architecture.md, "Pure core, thin shell"):
run twice on the same input it returns the same output, and the call has no side effect:
it starts no task and touches no event loop, reads no system clock, opens no file,
socket or process, and leaves its inputs as they were.

The deciders are found, not listed: every module-level ``decide`` / ``decide_*`` in the
package, plus the breaker's gate as ``Breaker.gate`` hands it to the deciders that ask it
(``gate=``). A new decider is covered by being written; its inputs are drawn from its
type hints (``strategy_for``), with the few values that need a shape of their own below.

Output is compared after what the runner stamps anyway is set aside: an event's id (ids
that name it, ``causation_id``, follow it) and its ``at``.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import collections.abc
import copy
import dataclasses
import enum
import importlib
import inspect
import pickle
import pkgutil
import socket
import subprocess
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import herdbook
from herdbook.agent.protocol import MemorySequence
from herdbook.agent.protocol import Sequence as SeqSource
from herdbook.clock import SystemClock
from herdbook.config import BreakerConfig
from herdbook.events.base import Event
from herdbook.events.breaker_events import BreakerReset, BreakerTripped, HeldAction
from herdbook.events.health_report import HealthReport
from herdbook.projector.node_view import NodeView
from herdbook.reactors.breaker import Breaker, BreakerFold
from herdbook.reactors.breaker_deciders import BreakerState, fold
from herdbook.reactors.decide_runner import Context, DecideRunner
from tests.fakes import FakeClock

BASE = datetime(2026, 1, 1)
TIMES = st.datetimes(min_value=BASE - timedelta(hours=3), max_value=BASE + timedelta(hours=3),
                     timezones=st.just(UTC))
"""Within a few hours of each other: windows, timeouts and resets overlap."""
WORDS = st.sampled_from(["", "n1", "n2", "a", "fleet", "pool:a", "unhealthy", "fatal",
                         "healthy", "degraded", "drain", "x"])
"""Ids, names and reasons: few, so that views name each other and scopes and pools meet."""


class SideEffect(AssertionError):
    """A decider did what only the shell may."""


class Ids:
    """A context's id source: a value (deep-copied with the input), so the twin run
    draws the same ids."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"id-{self.n}"


def _forbid(what: str) -> Callable[..., Any]:
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise SideEffect(what)
    return forbidden


@contextmanager
def shell_forbidden() -> Iterator[None]:
    """What a decider must not reach while it runs: the event loop (a task started from a
    decision that the runner may decide ten times), the system clock, files, sockets,
    processes."""
    targets: list[tuple[Any, str]] = [
        (asyncio, "get_running_loop"), (asyncio, "get_event_loop"), (asyncio, "create_task"),
        (asyncio, "ensure_future"), (asyncio.events, "get_running_loop"),
        (SystemClock, "now"), (SystemClock, "monotonic"), (builtins, "open"),
        (socket, "socket"), (socket, "create_connection"), (subprocess, "Popen")]
    with ExitStack() as stack:
        for owner, name in targets:
            stack.enter_context(mock.patch.object(
                owner, name, _forbid(f"{getattr(owner, '__name__', owner)}.{name}")))
        yield


# inputs --------------------------------------------------------------------------------

def _hints(cls_or_fn: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls_or_fn)
    except Exception:  # noqa: BLE001 - a name only imported for type checking: drawn by type
        return {}


def _fields(cls: type) -> list[tuple[str, Any, bool]]:
    """(name, type, has a default) of a msgspec Struct or a dataclass."""
    hints = _hints(cls)
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return [(f.name, hints.get(f.name, Any), f.default is not msgspec.NODEFAULT
                 or f.default_factory is not msgspec.NODEFAULT)
                for f in msgspec.structs.fields(cls)]
    return [(f.name, hints.get(f.name, Any), f.default is not dataclasses.MISSING
             or f.default_factory is not dataclasses.MISSING)
            for f in dataclasses.fields(cls) if f.init]


def _valid(cls: type) -> Callable[[dict[str, Any]], Any]:
    def build(kwargs: dict[str, Any]) -> Any:
        try:
            return cls(**kwargs)
        except Exception:  # noqa: BLE001 - a drawn value the type refuses: draw again
            return None
    return build


def _valid_value(cls: type) -> Callable[[Any], Any]:
    def build(value: Any) -> Any:
        try:
            return cls(value)
        except Exception:  # noqa: BLE001 - a drawn value the type refuses: draw again
            return None
    return build


def _breaker_state(events: list[BreakerTripped | BreakerReset]) -> BreakerState:
    state = BreakerState()
    for seq, event in enumerate(events, start=1):
        state = fold(state, event, seq)
    return state


def _gate(nodes: list[NodeView], state: BreakerState, config: BreakerConfig,
          now: datetime) -> Any:
    """The gate exactly as the control plane hands it to a decider (bootstrap passes
    ``Breaker.gate``; the reactor asks it at the decision's ``context.now``)."""
    breaker_fold = BreakerFold(nc=None)  # type: ignore[arg-type]
    breaker_fold.state = state
    clock = FakeClock(epoch=now)
    breaker = Breaker(breaker_fold, {v.id: v for v in nodes}, config, clock=clock,
                      runner=DecideRunner(None, breaker_fold, clock))  # type: ignore[arg-type]
    return breaker.gate(now)


SPECIAL: dict[Any, st.SearchStrategy[Any]] = {}


def strategy_for(hint: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """A strategy for a type hint: small values, times close together, views whose
    fields all vary (a decider reads any of them)."""
    if hint in SPECIAL:
        return SPECIAL[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a, depth) for a in args))
    if hint is type(None) or hint is None:
        return st.none()
    if hint is Any or depth > 3:
        return st.none()
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, set, frozenset,
                  collections.abc.Set):
        items = st.lists(strategy_for(args[0] if args else Any, depth + 1), max_size=3)
        return items.map(set) if origin is set else (
            items.map(frozenset) if origin in (frozenset, collections.abc.Set) else items)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0], depth + 1), max_size=3).map(tuple)
        return st.tuples(*(strategy_for(a, depth + 1) for a in args))
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping):
        return st.dictionaries(strategy_for(args[0], depth + 1),
                               strategy_for(args[1], depth + 1), max_size=3)
    if hint is str:
        return WORDS
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-1, 12)
    if hint is float:
        return st.sampled_from([0.0, 0.5, 1.0, 60.0, 600.0, 3600.0, 86400.0]) | st.floats(
            -1.0, 1e5, allow_nan=False)
    if hint is datetime:
        return TIMES
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    if isinstance(hint, type) and issubclass(hint, float | int | str):   # e.g. Duration
        base = next(b for b in (bool, float, int, str) if issubclass(hint, b))
        return strategy_for(base).map(_valid_value(hint)).filter(lambda v: v is not None)
    if getattr(hint, "_is_protocol", False):
        return st.none()   # a port no decider should need: the value None
    if isinstance(hint, type) and (issubclass(hint, msgspec.Struct)
                                   or dataclasses.is_dataclass(hint)):
        # the decider's own inputs vary in every field; what they hold, in the ones
        # without a default (drawing all of a view's 57 fields five deep is slow)
        fields = {name: strategy_for(kind, depth + 1) for name, kind, default in _fields(hint)
                  if depth == 0 or not default}
        return st.fixed_dictionaries(fields).map(_valid(hint)).filter(
            lambda built: built is not None)
    return st.from_type(hint)


SPECIAL.update({
    Context: st.builds(Context, now=TIMES, new_id=st.builds(Ids)),
    BreakerState: st.lists(st.one_of(
        st.builds(BreakerTripped, scope=st.sampled_from(["fleet", "pool:a"]),
                  taken_out=st.integers(0, 5), size=st.integers(0, 10),
                  limit=st.integers(0, 5), at=TIMES),
        st.builds(BreakerReset, scope=st.sampled_from(["", "fleet", "pool:a"]), at=TIMES)),
        max_size=3).map(_breaker_state),
    BreakerConfig: st.builds(BreakerConfig, enabled=st.booleans(),
                             max_share=st.sampled_from([0.1, 0.5, 1.0]),
                             window=st.sampled_from([60.0, 3600.0]),
                             min_nodes=st.integers(0, 2)),
    HealthReport: st.builds(HealthReport, report_id=WORDS, node_id=WORDS, boot_id=WORDS),
    SeqSource: st.builds(MemorySequence),
})
NODES = st.lists(strategy_for(NodeView), max_size=4)
GATE = st.builds(_gate, NODES, SPECIAL[BreakerState], SPECIAL[BreakerConfig], TIMES)
OVERRIDES: dict[str, st.SearchStrategy[Any]] = {"gate": st.none() | GATE}
"""By parameter name: a decider's ``gate`` is the breaker's, as the shell builds it."""


# the deciders ----------------------------------------------------------------------------

def ask_the_gate(gate: Any, view: NodeView, kind: HeldAction, would: str) -> Any:
    """The breaker's gate, asked as a decider asks it."""
    return gate(view, kind, would)


SHELLS = ("herdbook.cli", "herdbook.web")
"""Not imported (the CLI and the web are shells, and heavy); read as text, they must
define no decider (``test_the_deciders_are_found``)."""


def deciders() -> dict[str, Callable[..., Any]]:
    found: dict[str, Callable[..., Any]] = {"breaker gate": ask_the_gate}
    for info in pkgutil.walk_packages(herdbook.__path__, "herdbook."):
        if info.name.endswith("__main__") or info.name.startswith(SHELLS):
            continue   # runs the CLI; the presentation shells (their deciders: none, below)
        module = importlib.import_module(info.name)
        for name, fn in vars(module).items():
            if (inspect.isfunction(fn) and fn.__module__ == module.__name__
                    and (name == "decide" or name.startswith("decide_"))):
                found[f"{module.__name__}.{name}"] = fn
    return found


DECIDERS = deciders()


def test_the_deciders_are_found() -> None:
    """The discovery finds what docs/architecture.md calls deciders, in every room."""
    rooms = {name.rsplit(".", 1)[0] for name in DECIDERS}
    assert {"herdbook.api.deciders", "herdbook.reactors.eval_deciders",
            "herdbook.reactors.alloc_deciders", "herdbook.reactors.liveness",
            "herdbook.reactors.breaker_deciders", "herdbook.reactors.validation_deciders",
            "herdbook.reactors.sensitive", "herdbook.reactors.approver",
            "herdbook.reactors.classifier"} <= rooms
    assert len(DECIDERS) >= 60
    root = Path(herdbook.__file__).parent
    in_shells = [f"{path.relative_to(root.parent)}: {node.name}"
                 for shell in SHELLS for path in sorted(root.joinpath(shell.split(".")[1]).rglob("*.py"))
                 for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.FunctionDef)
                 and (node.name == "decide" or node.name.startswith("decide_"))]
    assert in_shells == [], "a decider in a shell: move it to the core, where this test runs it"


def inputs_of(fn: Callable[..., Any]) -> st.SearchStrategy[dict[str, Any]]:
    hints = _hints(fn)
    drawn: dict[str, st.SearchStrategy[Any]] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if name in OVERRIDES:
            drawn[name] = OVERRIDES[name]
        elif param.default is inspect.Parameter.empty:
            drawn[name] = strategy_for(hints.get(name, Any))
        elif name in hints:   # an optional input varies too, or keeps its default
            drawn[name] = st.just(param.default) | strategy_for(hints[name])
    if fn is ask_the_gate:
        drawn["gate"] = GATE
    return st.fixed_dictionaries(drawn)


def snapshot(kwargs: dict[str, Any]) -> bytes:
    """The inputs as bytes; a context's id source is meant to move, its time is not."""
    return pickle.dumps({k: (v.now if isinstance(v, Context) else v)
                         for k, v in kwargs.items()})


def normal(value: Any, names: dict[str, str]) -> Any:
    """The output with what the runner stamps set aside: each event's id by its place
    (and ids naming it likewise), its ``at``."""
    if isinstance(value, Event):
        names.setdefault(value.event_id, f"event-{len(names)}")
        fields = {f: normal(getattr(value, f), names) for f in value.__struct_fields__
                  if f not in ("event_id", "at", "causation_id", "correlation_id")}
        return (type(value).__name__, names[value.event_id],
                names.get(value.causation_id or "", value.causation_id),
                names.get(value.correlation_id or "", value.correlation_id), fields)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(normal(getattr(value, f.name), names)
                                        for f in dataclasses.fields(value)))
    if isinstance(value, list | tuple):
        return tuple(normal(v, names) for v in value)
    if isinstance(value, dict):
        return tuple((k, normal(v, names)) for k, v in value.items())
    return value


def run_once(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    with shell_forbidden():
        try:
            out = fn(**kwargs)
        except SideEffect:
            raise
        except Exception as err:  # noqa: BLE001 - refusing is an output too: the same twice
            return ("raised", type(err).__name__, str(err))
    return repr(normal(out, {}))


@pytest.mark.parametrize("name", sorted(DECIDERS))
def test_a_decider_is_a_function_of_its_input(name: str) -> None:
    fn = DECIDERS[name]

    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(inputs_of(fn))
    def twice(kwargs: dict[str, Any]) -> None:
        twin = copy.deepcopy(kwargs)
        before = snapshot(kwargs)
        first = run_once(fn, kwargs)
        assert snapshot(kwargs) == before, f"{name} changed its input"
        assert run_once(fn, twin) == first, f"{name} answered the same input twice apart"
    twice()
