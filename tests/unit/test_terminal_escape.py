"""Untrusted text never reaches a terminal raw: table, csv and plain lines show control
characters as escapes and print rich markup literally; json and yaml stay valid and
round-trip the text."""

from __future__ import annotations

import io
import json
from collections import Counter, deque

import pytest
import yaml
from rich.console import Console

from herdbook.cli.output import Format, render_object, render_rows, safe
from herdbook.cli.top import frame

HOSTILE = "\x1b[31mred\x07 [bold]loud[/bold]\nnext"
SHOWN = "\\x1b[31mred\\x07 [bold]loud[/bold]\\nnext"


@pytest.mark.parametrize(("raw", "shown"), [
    ("plain [red]x[/red]", "plain [red]x[/red]"),
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
    ("a\r\n\tb", "a\\r\\n\\tb"),
    ("\x00\x7f\x85\x9b", "\\x00\\x7f\\x85\\x9b"),
    ("gpu-é 温度", "gpu-é 温度"),
])
def test_safe_escapes_c0_del_and_c1_only(raw: str, shown: str) -> None:
    assert safe(raw) == shown


def assert_escaped(out: str) -> None:
    assert not any(c in out for c in "\x1b\x07\x9b"), out
    assert SHOWN in out


NODE = {"id": "gpu-1", "labels": {"team": HOSTILE}, "lifecycle_reason": HOSTILE,
        "checks": [{"name": "nvml", "message": HOSTILE}],
        "info": {"hostname": HOSTILE, "gpus": [1, 2]}}


def test_a_table_escapes_labels_and_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    render_rows([NODE], [("ID", "id"), ("LABELS", "labels"),
                         ("REASON", "lifecycle_reason")], Format.table)
    out = capsys.readouterr().out
    assert_escaped(out)
    assert len(out.splitlines()) == 2  # header and one row: the newline did not split it
    assert "team=" + SHOWN in out


def test_csv_escapes_too(capsys: pytest.CaptureFixture[str]) -> None:
    render_rows([NODE], [("ID", "id"), ("REASON", "lifecycle_reason")], Format.csv)
    out = capsys.readouterr().out
    assert_escaped(out)
    assert out.splitlines()[1] == f"gpu-1,{SHOWN}"


def test_describe_escapes_every_value_and_key(capsys: pytest.CaptureFixture[str]) -> None:
    render_object({**NODE, f"key{HOSTILE}": 1}, Format.table)
    out = capsys.readouterr().out
    assert_escaped(out)
    assert any(line.startswith("lifecycle_reason:") and line.endswith(f" {SHOWN}")
               for line in out.splitlines())
    assert f"message={SHOWN}" in out
    assert f"hostname: {SHOWN}" in out
    assert len(out.splitlines()) == 9  # no value split a line


@pytest.mark.parametrize("fmt", [Format.json, Format.yaml])
def test_json_and_yaml_stay_valid_and_keep_the_text(capsys: pytest.CaptureFixture[str],
                                                     fmt: Format) -> None:
    load = json.loads if fmt is Format.json else yaml.safe_load
    render_object(NODE, fmt)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert load(out)["lifecycle_reason"] == HOSTILE
    render_rows([NODE], [("ID", "id")], fmt)
    assert load(capsys.readouterr().out)[0]["labels"]["team"] == HOSTILE


def test_top_shows_events_as_text_not_markup() -> None:
    lines = deque([f"10:00:00 cordoned gpu-1 alice {HOSTILE}"])
    screen = io.StringIO()
    Console(file=screen, width=300, force_terminal=False).print(
        frame({"states": Counter({"READY": 1}), "p50": None, "p99": None, "max": None},
              {}, lines, deque([f"gpu-1: READY → {HOSTILE}"]), "nats://x"))
    out = screen.getvalue()
    assert_escaped(out)
    assert out.count(SHOWN) == 2
