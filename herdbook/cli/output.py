"""Rendering: table, json, yaml, csv.

Every string here may come from an event or an agent (labels, reasons, messages, ids,
hostnames): table, csv and plain lines show its control characters as escapes (``safe``)
and never read rich markup in it; json and yaml escape them by their own rules."""

from __future__ import annotations

import csv
import json
import re
import sys
from enum import StrEnum
from typing import Annotated, Any

import msgspec
import typer
from rich.console import Console

# Piped output is for scripts: never truncate a column to a terminal width.
console = Console(highlight=False, soft_wrap=True,
                  width=None if sys.stdout.isatty() else 10_000)


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


Output = Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml or csv.")]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def safe(text: str) -> str:
    """``text`` with its C0 and C1 control characters and DEL written as escapes
    (ESC -> ``\\x1b``, newline -> ``\\n``): nothing it holds moves the cursor, recolours
    the terminal or splits a line."""
    return _CONTROL.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)


def echo(text: str) -> None:
    """One line of (partly) untrusted text on stdout: escaped, no markup, no emoji."""
    sys.stdout.write(safe(text) + "\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        text = ",".join(f"{k}={v}" for k, v in value.items())
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, list):
        text = ",".join(map(str, value))
    else:
        text = str(value)
    return safe(text)


def render_rows(rows: list[dict[str, Any]], columns: list[tuple[str, str]], fmt: Format) -> None:
    """``columns`` = (header, key) for table and csv; json/yaml print whole objects."""
    if fmt is Format.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(rows), indent=2).decode() + "\n")
    elif fmt is Format.yaml:
        import yaml
        sys.stdout.write(yaml.safe_dump(rows, sort_keys=False))
    elif fmt is Format.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow([header for header, _ in columns])
        for row in rows:
            writer.writerow([_cell(row.get(key)) for _, key in columns])
    else:
        # Plain aligned columns: rich's Table takes seconds at 10k rows.
        cells = [[header for header, _ in columns]]
        cells.extend([_cell(row.get(key)) for _, key in columns] for row in rows)
        widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
        lines = ("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in cells)
        sys.stdout.write("\n".join(lines) + "\n")


def render_object(obj: dict[str, Any], fmt: Format) -> None:
    if fmt is Format.json:
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")
    elif fmt is Format.yaml:
        import yaml
        sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))
    elif fmt is Format.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(["key", "value"])
        for key, value in obj.items():
            writer.writerow([key, _cell(value)])
    else:
        width = max(len(safe(k)) for k in obj) if obj else 0
        for key, value in obj.items():
            label = f"{safe(key) + ':':<{width + 1}}"
            if isinstance(value, list) and value and isinstance(value[0], dict):
                echo(label)
                for item in value:
                    echo("  - " + ", ".join(f"{k}={v}" for k, v in item.items()))
            elif isinstance(value, dict) and value and all(
                    not isinstance(v, dict | list) for v in value.values()):
                echo(f"{label} {_cell(value)}")
            elif isinstance(value, dict):
                echo(label)
                for k, v in value.items():
                    echo(f"  {safe(str(k))}: {_cell(v)}")
            else:
                echo(f"{label} {_cell(value)}")
