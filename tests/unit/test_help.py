"""`--help` an operator enjoys (issue 16): every command and option has help text, no
sentence is broken by markup (" ."), no flag shows ``<bool>``, every command shows an
example, and every example parses (its options and arguments exist)."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from herdbook.cli.examples import EXAMPLES
from herdbook.cli.main import app
from herdbook.cli.usage import PANELS, finish_help

STRAY = re.compile(r"(?<!\.) \.(?![./\w])")
ROOT = typer.main.get_command(app)
finish_help(ROOT)


def commands(group: Any = ROOT, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, group)]
    for name, sub in getattr(group, "commands", {}).items():
        out += commands(sub, (*path, name))
    return out


ALL = commands()
LEAVES = [(path, cmd) for path, cmd in ALL if path and (
    not hasattr(cmd, "commands") or cmd.invoke_without_command)]
"""What runs: every command, and a group that runs itself too (`herd agent`)."""


def help_of(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, (path, result.output)
    return result.output


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=lambda p: " ".join(p) or "herd")
def test_every_help_is_whole(path: tuple[str, ...]) -> None:
    text = help_of(path)
    flat = " ".join(text.replace("│", " ").split())
    # a sentence cut by swallowed markup ("live ."); "...", "./.herd" and ".yaml" are fine
    assert not STRAY.search(flat) and " ," not in flat, STRAY.search(flat)
    assert "<bool>" not in text
    command = dict(ALL)[path]
    assert (command.help or "").strip(), f"{path}: no help text"
    for param in command.params:
        assert (getattr(param, "help", None) or "").strip(), f"{path}: {param.name} has no help"
    if path in dict(LEAVES):
        assert "Example" in text, f"{' '.join(path)}: no example"


def test_every_command_has_an_example_and_every_example_a_command() -> None:
    leaves = {" ".join(path) for path, _ in LEAVES}
    assert leaves - set(EXAMPLES) == set()
    assert set(EXAMPLES) - leaves == set()


@pytest.mark.parametrize("line", [line for lines in EXAMPLES.values() for line in lines])
def test_every_example_parses(line: str) -> None:
    words = shlex.split(line.split(" > ")[0])
    assert words[0] == "herd"
    command, args = ROOT, words[1:]
    while hasattr(command, "commands") and args and args[0] in command.commands:
        command, args = command.commands[args[0]], args[1:]
    context = command.make_context(words[0], list(args), resilient_parsing=False)
    assert context.params is not None


def test_the_commands_are_grouped_in_panel_order() -> None:
    text = help_of(())
    seen = [panel for panel in PANELS if f"─ {panel} " in text]
    assert seen == list(PANELS)
    assert [text.index(f"─ {panel} ") for panel in PANELS] == sorted(
        text.index(f"─ {panel} ") for panel in PANELS)
    for name, command in ROOT.commands.items():
        assert getattr(command, "rich_help_panel", None) in PANELS, name


def test_herd_dash_dash_version_prints_the_version_like_herd_version() -> None:
    import herdbook
    for args in (["--version"], ["version"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0 and result.output.strip() == herdbook.__version__, args
