"""docs/architecture.md: no copied block of logic in ``herdbook/`` or ``tests/``. Where two
places need the same steps, one piece of code serves both (a helper in the room both may
import; for tests ``tests/conftest.py``, ``tests/servers.py``, ``tests/world.py``,
``tests/fakes.py``, a suite's conftest).

The check is self-contained (CI has no duplicate-code tool): every window of ``WINDOW``
consecutive logic lines of a ``.py`` file, its white space folded, is compared by its text
with every other; blank lines, comments, lone brackets and import statements do not count
(an import list says what a module uses, not what it does). Identical text only: two
blocks of the same shape with other names are a judgment, made with the ``duplicates``
command where a developer has it (``duplicates --most 200``), and recorded below when a row
was kept. Where ``duplicates`` is on PATH, tests/integration/test_duplicates_command.py
checks its identical rows too (it runs a process: not a unit test).

``ALLOWED`` names each copy that is kept, with why: the two files and a string that occurs
in the copied text (so a new copy between the same files is still found), and one entry
that no longer matches anything fails too, so the list only shrinks with the copies.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("herdbook", "tests")
WINDOW = 8
"""Logic lines a copy must share to count: 8 lines is a block (a loop with its handling, a
fixture's body), fewer is mostly an idiom (try/except/finally around one call)."""


@dataclass(frozen=True)
class Allowed:
    a: str
    b: str
    marker: str
    """A string in the copied text: an entry covers that copy, not every copy between
    the two files."""
    why: str


ALLOWED: list[Allowed] = []


@dataclass(frozen=True)
class Copy:
    a: str
    a_lines: tuple[int, int]
    b: str
    b_lines: tuple[int, int]
    text: str
    """The copied logic lines, white space folded, one per line."""

    def __str__(self) -> str:
        first = self.text.splitlines()[0]
        return (f"{self.a}:{self.a_lines[0]}-{self.a_lines[1]} ~ "
                f"{self.b}:{self.b_lines[0]}-{self.b_lines[1]}  ({first!r} ...)")


LONE_PUNCTUATION = re.compile(r"[()\[\]{},:;]*")
IMPORT = re.compile(r"(from \S+ )?import \S")


def logic_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line with its white space folded) of each line that does something."""
    kept: list[tuple[int, str]] = []
    in_import = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = " ".join(raw.split())
        if in_import:
            in_import = ")" not in line
            continue
        if not line or line.startswith("#") or LONE_PUNCTUATION.fullmatch(line):
            continue
        if IMPORT.match(line):
            in_import = line.endswith("(")
            continue
        kept.append((number, line))
    return kept


def copies(files: dict[str, str], window: int = WINDOW) -> list[Copy]:
    """Every run of ``window`` or more logic lines that stands in two places (two files,
    or twice in one), the overlapping windows of one run joined."""
    places: dict[str, list[tuple[str, int]]] = defaultdict(list)
    lines = {name: logic_lines(text) for name, text in files.items()}
    for name, kept in lines.items():
        for i in range(len(kept) - window + 1):
            places["\n".join(line for _, line in kept[i:i + window])].append((name, i))
    runs: dict[tuple[str, str, int], list[int]] = defaultdict(list)
    for where in places.values():
        for x, (a, i) in enumerate(where):
            for b, j in where[x + 1:]:
                if a == b and abs(i - j) < window:
                    continue      # a repeated line overlapping itself, not a copy
                runs[(a, b, j - i)].append(i)
    found = []
    for (a, b, shift), starts in sorted(runs.items()):
        starts.sort()
        first = previous = starts[0]
        for start in [*starts[1:], None]:
            if start is not None and start == previous + 1:
                previous = start
                continue
            last = previous + window - 1
            found.append(Copy(a, (lines[a][first][0], lines[a][last][0]),
                              b, (lines[b][first + shift][0], lines[b][last + shift][0]),
                              "\n".join(line for _, line in lines[a][first:last + 1])))
            if start is not None:
                first = previous = start
    return found


def allowed_by(copy: Copy, allowed: Iterable[Allowed] = ALLOWED) -> Allowed | None:
    for entry in allowed:
        if {entry.a, entry.b} == {copy.a, copy.b} and entry.marker in copy.text:
            return entry
    return None


def tree() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text(errors="replace")
            for top in SCANNED for path in sorted((ROOT / top).rglob("*.py"))}


@pytest.fixture(scope="module")
def found() -> list[Copy]:
    return copies(tree())


def test_no_block_of_logic_is_copied(found: list[Copy]) -> None:
    wrong = [str(c) for c in found if allowed_by(c) is None]
    assert not wrong, (
        f"{len(wrong)} block(s) of {WINDOW}+ logic lines copied: let one piece of code serve "
        "both (a shared helper or fixture), or, where it is not logic, add it to ALLOWED in "
        "tests/unit/test_no_copies.py with why:\n" + "\n".join(wrong))


def test_every_allowed_copy_still_stands(found: list[Copy]) -> None:
    stale = [f"{e.a} ~ {e.b} ({e.marker!r})" for e in ALLOWED
             if not any(allowed_by(c, [e]) for c in found)]
    assert not stale, "no longer copied, remove from ALLOWED:\n" + "\n".join(stale)


BODY = """
def settle(server, events):
    events = list(events)
    deadline = time.monotonic() + 5
    for event in events:
        # a comment line does not count
        server.publish(event)
        if time.monotonic() > deadline:
            raise TimeoutError(event)

    server.flush()
    return [server.read(e) for e in events]
"""


def test_a_copied_block_is_found_and_imports_comments_and_other_code_are_not() -> None:
    imports = "from x import (\n    a,\n    b,\n)\nimport y\n" * 5
    files = {
        "one.py": "import os\n" + BODY + "\n# the end\n",
        "two.py": imports + "X = 1\n" + BODY.replace("    ", "  "),   # other indentation
        "three.py": imports + BODY.replace("server.flush()", "server.drain()"),
    }
    found = copies(files)
    assert [(c.a, c.a_lines, c.b, c.b_lines) for c in found] == [
        ("one.py", (3, 13), "two.py", (28, 38))]
    assert found[0].text.splitlines()[0] == "def settle(server, events):"
    assert len(found[0].text.splitlines()) == 9     # one run of 9 lines, not two windows
    # three.py's copy differs in one line: 4 and 4 lines around it are below the window
    assert copies({"a.py": imports * 2, "b.py": imports * 3}) == []
    assert [(c.a, c.a_lines, c.b, c.b_lines) for c in copies({"a.py": BODY + BODY})] == [
        ("a.py", (2, 12), "a.py", (14, 24))]           # twice in one file counts too
    entry = Allowed("two.py", "one.py", "server.read(e)", "a test")
    assert allowed_by(found[0], [entry]) is entry
    assert allowed_by(found[0], [Allowed("one.py", "two.py", "not in it", "")]) is None
