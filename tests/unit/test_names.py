"""Names that say one thing (issue 30 item 6): no two modules of herdbook/ share a name,
but a CLI module named after its command (``cli/breaker.py`` is `herd breaker`); no two
public classes share a name. Two things under one name make every import, log line
(a logger is named after its module) and stack trace ambiguous to a reader."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "herdbook"

# Names still shared while their owners finish moving them; this list only shrinks.
PENDING: dict[str, str] = {}


def modules_by_name(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if path.name == "__init__.py" or rel.parts[0] == "cli":
            continue
        found[path.stem].append(str(rel))
    return found


def classes_by_name(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(root)))
    return found


def shared(found: dict[str, list[str]]) -> list[str]:
    return [f"{name}: {', '.join(where)}" for name, where in sorted(found.items())
            if len(where) > 1 and name not in PENDING]


def test_no_two_modules_share_a_name() -> None:
    found = shared(modules_by_name(PACKAGE))
    assert not found, "rename one of each:\n" + "\n".join(found)


def test_no_two_public_classes_share_a_name() -> None:
    found = shared(classes_by_name(PACKAGE))
    assert not found, "rename one of each:\n" + "\n".join(found)


def test_pending_names_are_still_shared() -> None:
    both = {**modules_by_name(PACKAGE), **classes_by_name(PACKAGE)}
    done = [name for name in PENDING if len(both.get(name, [])) < 2]
    assert not done, f"no longer shared, take them off PENDING: {done}"


def test_the_checks_find_a_shared_name(tmp_path: Path) -> None:
    for room in ("api", "events", "cli"):
        (tmp_path / room).mkdir()
        (tmp_path / room / "breaker.py").write_text("class Breaker:\n    pass\n")
    assert shared(modules_by_name(tmp_path)) == ["breaker: api/breaker.py, events/breaker.py"]
    assert shared(classes_by_name(tmp_path)) == [
        "Breaker: api/breaker.py, cli/breaker.py, events/breaker.py"]
