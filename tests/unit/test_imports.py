"""The import graph of ``herdbook/``: no cycle anywhere, and DESIGN §2's direction.

Every module is parsed with ``ast``, never imported, so the check has no side effects
and sees every import: at module level, inside functions and methods (a function-level
import that closes a loop is still a cycle; it only hides it until the call), and under
``if TYPE_CHECKING:`` (a loop in the types is a loop in the layering).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path

import pytest

import herdbook

ROOT = Path(herdbook.__file__).parent
PACKAGE = ROOT.name

Graph = dict[str, dict[str, int]]
"""module -> {imported herdbook module: line of the first import of it}"""


def module_names(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names one import statement names, relative ones made absolute. For
    ``from a.b import c`` both ``a.b`` and ``a.b.c`` (``c`` may be a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    return [module, *(f"{module}.{alias.name}" for alias in node.names)]


def _package_of(name: str, is_package: bool) -> str:
    return name if is_package else name.rpartition(".")[0]


def imported_names(name: str, is_package: bool, source: str) -> dict[str, int]:
    """Every dotted name ``source`` imports anywhere, with the line of its first import."""
    names: dict[str, int] = {}
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for target in _targets(node, _package_of(name, is_package)):
                names.setdefault(target, node.lineno)
    return names


def imports_by_function(name: str, is_package: bool,
                        source: str) -> list[tuple[str | None, list[str], int]]:
    """(the module-level function the import is inside, or None; the names it imports;
    line) for every import statement of ``source``. A nested function counts as the
    module-level function around it, a method as its class (None)."""
    found: list[tuple[str | None, list[str], int]] = []
    for statement in ast.parse(source, filename=name).body:
        owner = (statement.name if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)
                 else None)
        for node in ast.walk(statement):
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append((owner, _targets(node, _package_of(name, is_package)),
                              node.lineno))
    return found


def build_graph(sources: Mapping[str, tuple[bool, str]]) -> Graph:
    """``sources``: module -> (is a package, its text). An imported name resolves to the
    longest known module it starts with (``a.b.func`` -> ``a.b``); importing ``a.b.c``
    also runs ``a/__init__.py`` and ``a/b/__init__.py`` where they exist, so those are
    edges too (``herdbook/agent`` and others are namespace packages, with none)."""
    graph: Graph = {}
    for name, (is_package, source) in sources.items():
        edges: dict[str, int] = {}
        for imported, line in imported_names(name, is_package, source).items():
            target = imported
            while target and target not in sources:
                target = target.rpartition(".")[0]
            while target:
                if target != name and target in sources:
                    edges.setdefault(target, line)
                target = target.rpartition(".")[0]
        graph[name] = edges
    return graph


def herdbook_graph() -> Graph:
    return build_graph({name: (is_package, path.read_text())
                        for name, (path, is_package) in module_names().items()})


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's components, iteratively (no recursion limit on a deep chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(graph[succ])))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def one_cycle(graph: Graph, component: Iterable[str]) -> str:
    """The shortest loop through the component's first module, with the import lines."""
    members = set(component)
    start = min(members)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node]):
            if succ not in members or succ in came_from:
                continue
            came_from[succ] = node
            if succ == start:
                queue.clear()
                break
            queue.append(succ)
    path = [start]
    while True:
        path.append(came_from[path[-1]])
        if path[-1] == start:
            break
    path.reverse()
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(path)) + f" -> {start}"


def cycles(graph: Graph) -> list[str]:
    return [one_cycle(graph, c) for c in strongly_connected(graph) if len(c) > 1]


def test_no_import_cycle() -> None:
    found = cycles(herdbook_graph())
    assert not found, "import cycles (move what both sides need into a module neither " \
        "imports):\n" + "\n".join(found)


def test_a_cycle_through_a_function_level_or_relative_import_is_found() -> None:
    graph = build_graph({
        "pkg": (True, ""),
        "pkg.a": (False, "from pkg.b import thing\n"),
        "pkg.b": (False, "def f():\n    from . import c\n"),
        "pkg.c": (False, "from .a import x\n"),
        "pkg.d": (False, "import pkg.a\n"),
    })
    assert cycles(graph) == ["pkg.a (line 1) -> pkg.b (line 2) -> pkg.c (line 1) -> pkg.a"]
    assert build_graph({"p": (True, ""), "p.q": (True, "from p import r\n"),
                        "p.r": (False, "")})["p.q"] == {"p": 1, "p.r": 1}


def _inside(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _sub(*names: str) -> tuple[str, ...]:
    return tuple(f"{PACKAGE}.{n}" for n in names)


# (importer, what it must not import), from DESIGN §2: events is the vocabulary and
# imports nothing else of herdbook; projector (folds) and reactors (deciders) import
# events, and reactors read the projector's views; the agent imports events, and the
# projector's alloc fold (it keeps its allocations by the same fold as the control
# plane); history (the read side: log reader, cause chains, audit) imports events, the
# projector's time-travel fold and the health classifier's actor name, and is imported
# by the API, never the other way; control wires everything. The simulator drives the
# control plane and the agent, so nothing under them imports it.
FORBIDDEN = [
    (_sub("events"), _sub("projector", "reactors", "agent", "control", "cli", "sim",
                          "config", "credentials", "files", "signals", "history", "api")),
    (_sub("projector"), _sub("reactors", "agent", "control", "cli", "sim", "history", "api")),
    (_sub("reactors"), _sub("agent", "control", "cli", "sim", "history", "api")),
    (_sub("agent"), _sub("reactors", "control", "cli", "sim", "history", "api")),
    (_sub("history"), _sub("agent", "control", "cli", "sim", "api")),
    # health (what a report means: policies, actions, fault history and holds) is pure
    # code over the vocabulary; the reactors, the API and the CLI apply it.
    (_sub("health"), _sub("projector", "reactors", "agent", "control", "cli", "sim", "history",
                          "api", "web", "natsd", "config")),
    # web (the HTTP API and the console) calls the API's handlers in-process and reads
    # the views; the composition root hands it the rest (tokens, heartbeat ages).
    (_sub("web"), _sub("agent", "control", "cli", "sim", "reactors", "natsd")),
]

# Exceptions that stand today, each with why and what removes it: none.
ALLOWED: set[tuple[str, str]] = set()


@pytest.mark.parametrize(("importers", "forbidden"), FORBIDDEN,
                         ids=[i[0] for i, _ in FORBIDDEN])
def test_dependency_direction(importers: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
    graph = herdbook_graph()
    wrong = [f"{module} imports {target} (line {line})"
             for module, edges in sorted(graph.items()) if _inside(module, importers)
             for target, line in sorted(edges.items())
             if _inside(target, forbidden) and (module, target) not in ALLOWED]
    assert not wrong, "\n".join(wrong)


def test_only_the_cli_imports_typer_and_rich() -> None:
    wrong = [f"{name} imports {imported} (line {line})"
             for name, (path, is_package) in sorted(module_names().items())
             if not _inside(name, _sub("cli"))
             for imported, line in imported_names(name, is_package, path.read_text()).items()
             if _inside(imported, ("typer", "rich"))]
    assert not wrong, "\n".join(wrong)


def test_only_the_composition_root_and_herd_up_import_web() -> None:
    allowed = _sub("web", "control", "cli.up")
    wrong = [f"{module} imports {target} (line {line})"
             for module, edges in sorted(herdbook_graph().items()) if not _inside(module, allowed)
             for target, line in sorted(edges.items()) if _inside(target, _sub("web"))]
    assert not wrong, "\n".join(wrong)


# The CLI is a client of the API: of the server's rooms it imports only what the
# commands that run a server-side process need (``herd up``, ``herd agent``, ``herd nats
# cluster``, ``herd sim``), and only inside them, so ``herd --help`` and every other
# command load none of it. (module, module-level function) -> why.
SERVER_ROOMS = _sub("control", "reactors", "projector", "agent")
RUNS_A_PROCESS = {
    (f"{PACKAGE}.cli.up", "up"): "runs the control plane",
    (f"{PACKAGE}.cli.agent", "agent"): "runs the node agent",
    (f"{PACKAGE}.cli.agent", "sample"): "reads this node's GPUs as the agent does",
    (f"{PACKAGE}.cli.cluster", "cluster"): "runs local nats-servers",
    (f"{PACKAGE}.cli.sim", "sim_command"): "runs a simulated fleet",
    (f"{PACKAGE}.cli.sim", "_chaos"): "runs a simulated fleet (herd sim --chaos)",
    (f"{PACKAGE}.cli.health", "test_policy"): "runs the classifier's own decider offline "
                                              "(herd health test-policy)",
}


def cli_reaching_into_the_server(modules: Mapping[str, tuple[bool, str]]) -> list[str]:
    wrong = []
    for name, (is_package, source) in sorted(modules.items()):
        if not _inside(name, _sub("cli")):
            continue
        for owner, targets, line in imports_by_function(name, is_package, source):
            hit = next((t for t in targets if _inside(t, SERVER_ROOMS)), None)
            if hit is not None and (name, owner) not in RUNS_A_PROCESS:
                where = f"in {owner}()" if owner else "outside a function"
                wrong.append(f"{name} imports {hit} (line {line}, {where})")
    return wrong


def test_the_cli_imports_server_rooms_only_inside_the_commands_that_run_them() -> None:
    wrong = cli_reaching_into_the_server({
        name: (is_package, path.read_text())
        for name, (path, is_package) in module_names().items()})
    assert not wrong, "the CLI asks the API; move what it needs out of the server's " \
        "rooms (events/, history/, the API's request Structs):\n" + "\n".join(wrong)


def test_a_cli_import_of_a_server_room_is_found_at_any_depth_outside_a_process_command() -> None:
    cli = f"{PACKAGE}.cli"
    wrong = cli_reaching_into_the_server({
        f"{cli}.up": (False, f"def up():\n    from {PACKAGE}.control.up import run\n"),
        f"{cli}.main": (False, f"""
def version():
    from {PACKAGE} import __version__
def status():
    def inner():
        from {PACKAGE}.reactors import health_policy
class Helper:
    def method(self):
        from ..projector.node_view import NodeView
"""),
        f"{cli}.node": (False, f"from {PACKAGE}.agent import connection\n"
                               f"from {PACKAGE}.history.times import parse_time\n"),
    })
    assert wrong == [
        f"{cli}.main imports {PACKAGE}.reactors (line 6, in status())",
        f"{cli}.main imports {PACKAGE}.projector.node_view (line 9, outside a function)",
        f"{cli}.node imports {PACKAGE}.agent (line 1, outside a function)",
    ]


def test_one_http_stack_aiohttp() -> None:
    """aiohttp serves the API and sends the webhooks (issue 30): a second HTTP client
    (httpx, requests) would be a dependency that pays for nothing. The tests too: the
    test extras install only what pyproject names."""
    tests = Path(__file__).parents[1]
    files = [(name, is_package, path) for name, (path, is_package) in module_names().items()]
    files += [(name, is_package, path)
              for name, (path, is_package) in module_names(tests).items()]
    wrong = [f"{name} imports {imported} (line {line})"
             for name, is_package, path in sorted(files)
             for imported, line in imported_names(name, is_package, path.read_text()).items()
             if _inside(imported, ("httpx", "requests"))]
    assert not wrong, "\n".join(wrong)


def test_no_process_of_herdbook_forks() -> None:
    """The backlog is read in the process that folds it: the forked reader was slower on
    the 2 CPUs measured and is gone (issue 30, docs/performance.md). A fork in an asyncio
    process with a NATS connection is a second reader to watch; one comes back only with
    a benchmark that shows it winning."""
    wrong = [f"{name} line {node.lineno}"
             for name, (path, _) in sorted(module_names().items())
             for node in ast.walk(ast.parse(path.read_text(), filename=name))
             if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
             and node.value.id == "os" and node.attr in ("fork", "forkpty")]
    assert not wrong, "\n".join(wrong)
