"""Rendering: table, json, yaml, csv."""

from __future__ import annotations

import csv
import json
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


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return str(value)


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
        width = max(len(k) for k in obj) if obj else 0
        for key, value in obj.items():
            if isinstance(value, list) and value and isinstance(value[0], dict):
                console.print(f"{key + ':':<{width + 1}}", markup=False)
                for item in value:
                    console.print("  - " + ", ".join(f"{k}={v}" for k, v in item.items()),
                                  markup=False)
            elif isinstance(value, dict) and value and all(
                    not isinstance(v, dict | list) for v in value.values()):
                console.print(f"{key + ':':<{width + 1}} {_cell(value)}", markup=False)
            elif isinstance(value, dict):
                console.print(f"{key + ':':<{width + 1}}", markup=False)
                for k, v in value.items():
                    console.print(f"  {k}: {_cell(v)}", markup=False)
            else:
                console.print(f"{key + ':':<{width + 1}} {_cell(value)}", markup=False)
