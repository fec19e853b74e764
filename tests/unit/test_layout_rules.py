"""Rules of docs/architecture.md that no import graph shows, checked on the source with
``ast`` (nothing imported, nothing run):

- a unit test starts no server and no process: tests/unit imports neither ``subprocess``
  nor the `herd` process runner, asks for no nats-server fixture (they live in
  ``tests/servers.py``, offered to tests/integration and tests/e2e only), and listens
  on no socket; whatever does any of that lives in tests/integration;
- no module of ``herdbook/`` keeps mutable state in module globals (a ``global``
  statement): state is an object its user owns (``projector.catch_up_gc.CatchUpGc``);
- no module of ``herdbook/`` is longer than 400 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import herdbook

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"
PACKAGE = Path(herdbook.__file__).parent

MAX_LINES = 400

SERVER_FIXTURES = frozenset({"nats_server", "nc", "nc_without_atomic", "aiohttp_client",
                             "aiohttp_server", "aiohttp_raw_server"})
"""``tests/servers.py``'s fixtures (each starts, or needs, a real nats-server) and
pytest-aiohttp's (each serves a socket)."""

PROCESS_MODULES = frozenset({"multiprocessing", "pty", "socketserver", "http.server"})
SUBPROCESS_CALLS = frozenset({"run", "Popen", "call", "check_call", "check_output",
                              "getoutput", "getstatusoutput"})
"""``subprocess.<name>(...)``, or the name imported from it (a test may import the module
to hold its calls off, as test_deciders_pure does)."""
OS_CALLS = frozenset({"fork", "forkpty", "system", "popen", "spawnv", "spawnvp", "spawnl",
                      "spawnlp", "execv", "execvp", "execl", "execlp"})
"""``os.<name>(...)``: each starts a process."""
SERVING_CALLS = frozenset({"create_subprocess_exec", "create_subprocess_shell", "listen",
                           "create_server", "start_server", "TCPSite", "AppRunner",
                           "TestServer", "TestClient"})
"""``<anything>.<name>(...)`` or ``<name>(...)``: a process, or a socket served."""
PROCESS_HELPERS = frozenset({"herd", "HERD"})
"""``tests/conftest.py``'s runner of the real `herd` CLI in a subprocess."""

GLOBAL_STATE_ALLOWED = {
    # A once-per-process verdict on the installed nats-py (its private parts checked at
    # start-up, cached): a fact about the process's library, which every client shares.
    "events/nats_private.py": "the nats-py check's cached verdict",
}

OVER_400 = {
    # Over 400 before issue 30 and nobody's to split in it: each may not grow past its
    # length here (a ratchet); one that falls to 400 or under must leave the list.
}


SUSPECT = re.compile("|".join([
    r"\b(?:{})\b".format("|".join(re.escape(name) for name in sorted(
        PROCESS_MODULES | SERVING_CALLS | SERVER_FIXTURES
        | {"subprocess", "tests.servers", "tests.integration", "tests.e2e",
           "aiohttp.test_utils", "EmbeddedNats"}))),
    r"\bos\.(?:{})\b".format("|".join(sorted(OS_CALLS))),
    r"from tests\.conftest import[^\n]*\b(?:{})\b".format("|".join(sorted(PROCESS_HELPERS)))]))
"""A module without any of the names above is not parsed (a parse of every unit test
module each run cost over a second on 2 busy cores)."""
GLOBAL = re.compile(r"^\s*global\s", re.MULTILINE)


def what_starts_something(source: str) -> list[str]:
    """Each import, fixture or call in one test module that starts a server or process."""
    if not SUSPECT.search(source):
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name in PROCESS_MODULES]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "subprocess":
                found += [f"line {node.lineno}: from subprocess import {a.name}"
                          for a in node.names if a.name in SUBPROCESS_CALLS]
            elif module in PROCESS_MODULES or module.startswith(("tests.servers",
                                                               "aiohttp.test_utils",
                                                               "tests.integration",
                                                               "tests.e2e")):
                found.append(f"line {node.lineno}: from {module} import ...")
            elif module == "tests.conftest":
                found += [f"line {node.lineno}: from tests.conftest import {a.name}"
                          for a in node.names if a.name in PROCESS_HELPERS]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (
                node.name.startswith("test") or any("fixture" in ast.unparse(d)
                                                    for d in node.decorator_list)):
            found += [f"line {node.lineno}: {node.name} asks for the fixture {a.arg}"
                      for a in node.args.args if a.arg in SERVER_FIXTURES]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                on = func.value.id if isinstance(func.value, ast.Name) else ""
                if (func.attr in SERVING_CALLS or on == "os" and func.attr in OS_CALLS
                        or on == "subprocess" and func.attr in SUBPROCESS_CALLS):
                    found.append(f"line {node.lineno}: .{func.attr}(...)")
            elif isinstance(func, ast.Name) and (func.id in SERVING_CALLS
                                                 or func.id == "EmbeddedNats"):
                found.append(f"line {node.lineno}: {func.id}(...)")
    return found


def test_no_unit_test_starts_a_server_or_a_process() -> None:
    offenders = {path.name: hits for path in sorted(UNIT.rglob("*.py"))
                 if (hits := what_starts_something(path.read_text()))}
    assert offenders == {}, "move these to tests/integration (they start a server or a process)"


def test_the_check_sees_each_way_a_test_starts_something() -> None:
    """The rule above, against the ways it names: each is found, plain code is not."""
    starts = {
        "subprocess.run(['true'])": 1, "from subprocess import Popen": 1,
        "import subprocess": 0, "from multiprocessing import Process": 1,
        "from tests.conftest import herd, wait_until": 1,
        "from tests.servers import nats_server": 1,
        "async def test_x(nc): pass": 1, "def test_y(tmp_path, nats_server): pass": 1,
        "async def f(): await asyncio.create_subprocess_exec('true')": 1,
        "os.fork()": 1, "os.system('true')": 1, "sock.listen()": 1,
        "EmbeddedNats(tmp, port=1).start()": 1, "await loop.create_server(f, '127.0.0.1', 0)": 1,
        "web.TCPSite(runner, port=0)": 1, "from aiohttp.test_utils import TestClient": 1,
        "async def test_w(aiohttp_client): pass": 1, "platform.system()": 0,
        "from tests.conftest import free_port, wait_until": 0,
        "def test_z(tmp_path, clock): listen = 1": 0, "nc = FakeNats()": 0,
        "def helper(store, nc): pass": 0, "@pytest.fixture\ndef f(nc): pass": 1,
    }
    assert {code: len(what_starts_something(code)) for code in starts} == starts


def test_no_module_keeps_state_in_globals() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if not GLOBAL.search(source := path.read_text()):
            continue   # no line starts with `global`: nothing to parse
        lines = [node.lineno for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.Global)]
        if lines:
            found[path.relative_to(PACKAGE).as_posix()] = lines
    unexplained = {name: lines for name, lines in found.items()
                   if name not in GLOBAL_STATE_ALLOWED}
    assert unexplained == {}, "module globals written through `global`: make them an object"
    assert set(GLOBAL_STATE_ALLOWED) <= set(found), "an allowed module no longer needs it"


def test_no_module_is_longer_than_400_lines() -> None:
    lengths = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
               for path in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in lengths.items() if n > MAX_LINES and name not in OVER_400}
    assert over == {}, f"split by responsibility: each module <= {MAX_LINES} lines"
    grown = {name: (lengths.get(name), ceiling) for name, ceiling in OVER_400.items()
             if ceiling is not None and lengths.get(name, 0) > ceiling}
    assert grown == {}, ("a module over 400 lines grew past its ceiling in OVER_400: split it "
                         "by responsibility instead (or, if another helper of issue 30 is "
                         "splitting it now, make its ceiling None there)")
    done = sorted(name for name, ceiling in OVER_400.items()
                  if ceiling is not None and lengths.get(name, 0) <= MAX_LINES)
    assert done == [], "these are 400 lines or fewer now: take them off OVER_400"


def test_what_herdbook_starts_under_a_unit_test_is_refused_too(starts_nothing: list[str]) -> None:
    """The static check cannot see a process herdbook's own code starts (a notifier's exec
    hook, the journalctl source): ``tests/unit/conftest.py`` refuses those at run time."""
    from herdbook.agent.kmsg import JournalSource
    from tests.unit.conftest import StartedSomething

    try:
        JournalSource(("true",))
    except StartedSomething:
        pass
    assert starts_nothing == ["started a process"]
    starts_nothing.clear()   # seen: this test passes
