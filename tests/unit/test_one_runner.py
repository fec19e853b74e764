"""The rule of docs/architecture.md "One runner, one clock", checked on the source (as
test_imports checks the directions): every writer goes through the one decide runner
because it cannot do otherwise, and nothing picks the wall clock behind its caller.

- No function in herdbook/ (a constructor included) gives a parameter or a dataclass
  field named ``runner`` or ``clock`` a default: a default would hide a second runner
  (which retries on its own, with its own ids) or the wall clock in a unit test.
- Only the composition root builds a ``DecideRunner``.
- ``SYSTEM_CLOCK`` is named only at composition roots.
- Only the runner (and the store itself) calls the store's appends."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "herdbook"

COMPOSITION_ROOTS = {
    "control/bootstrap.py",   # builds the one runner for a control plane
    "control/up.py",          # `herd up`: the real clock
    "sim/world.py",           # `herd sim`: a real control plane, the real clock
    "agent/main.py",          # the agent process: the real clock for its parts
}
RUNNER_BUILDERS = {"control/bootstrap.py"}
CLOCK_NAMERS = COMPOSITION_ROOTS | {"clock.py"}   # clock.py defines it
APPENDS = {"append", "append_decided", "append_atomic", "append_batch"}
APPENDERS = {
    "reactors/decide_runner.py",     # the one writer of the control plane
    "events/store.py",        # the store's own appends build on each other
    # An agent is not the control plane: it appends its own node's facts (registered,
    # boot checked, allocation states) with its own credentials, chained and retried
    # until stored (agent/connection.py), with no view to decide from or wait for.
    "agent/connection.py",
    "sim/light_fleet.py",     # `herd sim`'s light agents: the same facts as agent/
}


@cache
def modules() -> list[tuple[str, list[ast.AST]]]:
    """Every module of herdbook/ as its nodes, parsed and walked once for all checks."""
    return [(path.relative_to(PACKAGE).as_posix(),
             list(ast.walk(ast.parse(path.read_text(), str(path)))))
            for path in sorted(PACKAGE.rglob("*.py"))]


def defaulted(tree: list[ast.AST]) -> Iterator[tuple[int, str]]:
    """(line, name) of each parameter or class-level field named runner/clock that has
    a default."""
    for node in tree:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = args.posonlyargs + args.args
            with_default = positional[len(positional) - len(args.defaults):]
            with_default += [a for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                             if d is not None]
            yield from ((a.lineno, a.arg) for a in with_default if a.arg in ("runner", "clock"))
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                        and isinstance(stmt.target, ast.Name)
                        and stmt.target.id in ("runner", "clock")):
                    yield stmt.lineno, stmt.target.id


def named(tree: list[ast.AST], name: str) -> list[int]:
    return [node.lineno for node in tree
            if (isinstance(node, ast.Name) and node.id == name)
            or (isinstance(node, ast.Attribute) and node.attr == name)
            or (isinstance(node, ast.alias) and node.name == name)]


def store_appends(tree: list[ast.AST]) -> Iterator[tuple[int, str]]:
    """Calls of ``<x>.append_decided/append_atomic/append_batch(...)``, and of
    ``<x>.append(...)`` where ``<x>`` names a store (``store``, ``self.store``,
    ``self._store``...: a list's append is no write)."""
    for node in tree:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in APPENDS):
            continue
        receiver = ast.unparse(node.func.value)
        if node.func.attr != "append" or "store" in receiver.rsplit(".", 1)[-1].lower():
            yield node.lineno, f"{receiver}.{node.func.attr}"


def test_no_function_defaults_a_runner_or_a_clock() -> None:
    found = [f"{path}:{line}: {name}" for path, tree in modules()
             for line, name in defaulted(tree)]
    assert found == [], "a runner or a clock with a default (pass it in):\n" + "\n".join(found)


def test_only_the_composition_root_builds_a_decide_runner() -> None:
    found = [f"{path}:{line}" for path, tree in modules() if path not in RUNNER_BUILDERS
             for line in sorted({n.lineno for n in tree
                                 if isinstance(n, ast.Call)
                                 and ast.unparse(n.func).endswith("DecideRunner")})]
    assert found == [], "a DecideRunner built outside control/bootstrap.py:\n" + "\n".join(found)
    built = [line for path, tree in modules() if path in RUNNER_BUILDERS for line in sorted(
        {n.lineno for n in tree if isinstance(n, ast.Call)
         and ast.unparse(n.func).endswith("DecideRunner")})]
    assert len(built) == 1, f"control/bootstrap.py builds {len(built)} DecideRunners " \
        f"(lines {built}): one, and runner.waiting_on(reads) where a part reads another model"


def test_the_system_clock_is_named_only_at_composition_roots() -> None:
    found = [f"{path}:{line}" for path, tree in modules()
             if path not in CLOCK_NAMERS and not path.startswith("cli/")
             for line in named(tree, "SYSTEM_CLOCK")]
    assert found == [], "SYSTEM_CLOCK outside a composition root:\n" + "\n".join(found)


def test_only_the_runner_calls_the_stores_appends() -> None:
    found = [f"{path}:{line}: {call}" for path, tree in modules() if path not in APPENDERS
             for line, call in store_appends(tree)]
    assert found == [], "a store append outside reactors/decide_runner.py:\n" + "\n".join(found)


# Who may catch a ConflictError (an append whose expected version lost): the runner, which
# catches up and decides again; the store's own chained appends; and the agent, whose
# claim of its node is an append that expects the version it read (agent/main.py claims
# again on a conflict; agent/connection.py chains its node's facts).
CONFLICT_HANDLERS = APPENDERS | {"agent/main.py"}


def conflict_handlers(tree: list[ast.AST]) -> list[int]:
    return [node.lineno for node in tree if isinstance(node, ast.ExceptHandler)
            and node.type is not None and "ConflictError" in ast.unparse(node.type)]


def test_only_the_runner_and_the_agent_handle_a_conflict() -> None:
    found = [f"{path}:{line}" for path, tree in modules() if path not in CONFLICT_HANDLERS
             for line in conflict_handlers(tree)]
    assert found == [], "a ConflictError caught outside the runner (decide through it):\n" + \
        "\n".join(found)


def test_the_checks_find_what_they_look_for() -> None:
    """Each check on a snippet that breaks its rule: a check that finds nothing anywhere
    would pass as well."""
    assert conflict_handlers(list(ast.walk(ast.parse(
        "try:\n    pass\nexcept (OSError, ConflictError):\n    pass\n")))) == [3]
    bad = list(ast.walk(ast.parse(
        "class A:\n"
        "    clock: Clock = SYSTEM_CLOCK\n"
        "    def __init__(self, store, runner=None, *, clock=SYSTEM_CLOCK) -> None:\n"
        "        self.runner = runner or DecideRunner(store, self, clock)\n"
        "        self.items = []\n"
        "        self.items.append(1)\n"
        "    async def write(self, event):\n"
        "        await self.store.append(event)\n"
        "        await self._store.append_atomic([])\n")))
    assert sorted(defaulted(bad)) == [(2, "clock"), (3, "clock"), (3, "runner")]
    assert named(bad, "SYSTEM_CLOCK") == [2, 3]
    assert list(store_appends(bad)) == [(8, "self.store.append"),
                                        (9, "self._store.append_atomic")]
