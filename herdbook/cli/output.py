"""Rendering: table, json, yaml, csv.

Every string here may come from an event or an agent (labels, reasons, messages, ids,
hostnames): table, csv and plain lines show its control characters as escapes (``safe``)
and never read rich markup in it; json and yaml escape them by their own rules."""

from __future__ import annotations

import csv
import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from herdbook.text import CONTROL, escape

if TYPE_CHECKING:
    import typer
    from rich.console import Console


class LazyConsole:
    """A rich ``Console`` made on first use: a command that prints no rich text (`herd
    node list`) never imports rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        """The console itself, for what takes one (rich's ``Live``)."""
        if self._console is None:
            from rich.console import Console
            options = dict(self._options)
            if options.pop("piped_width", False):
                # Piped output is for scripts: never truncate a column to a terminal width.
                options["width"] = None if sys.stdout.isatty() else 10_000
            self._console = Console(**options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


console = LazyConsole(highlight=False, soft_wrap=True, piped_width=True)


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"


if TYPE_CHECKING:
    Output = Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml or csv.")]
else:
    def __getattr__(name: str) -> Any:
        """``Output``, the option of the commands that print: made when one of them is
        defined, so `herd node list` (``herdbook.cli.entry``) never imports typer."""
        if name != "Output":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import typer
        option = Annotated[Format, typer.Option("--output", "-o", help="table, json, yaml or "
                                                "csv [default: the context's, else table].",
                                                callback=context_output)]
        # typer finds the context parameter by its annotation, resolved in this module,
        # which imports typer only here
        context_output.__annotations__ = {"ctx": typer.Context, "value": Any, "return": Any}
        globals()["Output"] = option
        return option


def context_output(ctx: typer.Context, value: Any) -> Any:
    """``--output`` when given, else the context's ``output`` (``cli/contexts.py``; the
    app callback put it in ``ctx.obj``), else the command's default."""
    source = ctx.get_parameter_source("output")
    obj = ctx.find_root().obj
    chosen = obj.get("output") if isinstance(obj, dict) else None
    if chosen and (source is None or source.name == "DEFAULT"):
        return Format(chosen)
    return value

_CONTROL = CONTROL


def safe(text: str) -> str:
    """``text`` with its C0 and C1 control characters, DEL, line separators and bidi
    controls written as escapes (ESC -> ``\\x1b``, newline -> ``\\n``, U+202E ->
    ``\\u202e``, ``herdbook.text``): nothing it holds moves the cursor, recolours the
    terminal, reorders what it shows or splits a line."""
    return escape(text)


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


def _cells(values: list[Any]) -> list[str]:
    """One column's cells: a column of plain strings without a control character among
    them (ids, states) is taken as it is, in one pass at C speed."""
    if set(map(type, values)) <= {str}:
        texts: list[str] = values
        if not _CONTROL.search("".join(texts)):
            return texts
    return [_cell(value) for value in values]


def render_rows(rows: list[dict[str, Any]], columns: list[tuple[str, str]], fmt: Format) -> None:
    """``columns`` = (header, key) for table and csv; json/yaml print whole objects."""
    if fmt is Format.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(rows), indent=2).decode() + "\n")
    elif fmt is Format.yaml:
        import yaml
        sys.stdout.write(yaml.safe_dump(rows, sort_keys=False))
    else:
        render_columns([(header, [row.get(key) for row in rows]) for header, key in columns],
                       fmt)


def render_columns(columns: list[tuple[str, list[Any]]], fmt: Format) -> None:
    """Table or csv from (header, the column's values); what ``render_rows`` prints for
    rows holding these values."""
    if fmt is Format.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow([header for header, _ in columns])
        writer.writerows(zip(*(_cells(values) for _, values in columns), strict=True))
        return
    write_table([[header, *_cells(values)] for header, values in columns])


def table_cells(values: list[Any]) -> list[str]:
    """One column's cells as ``render_columns`` prints them, for ``write_table`` (made
    page by page as a listing's pages arrive: a column's cells are each value's alone)."""
    return _cells(values)


def write_table(cells: list[list[str]], widths: list[int] | None = None) -> None:
    """``render_columns``' table from its cells, column by column, each headed by its
    header (``widths``: each column's longest cell, where the caller kept them)."""
    if widths is None:
        widths = [max(map(len, column)) for column in cells[:-1]]
    sys.stdout.write(table_lines(cells, widths) + "\n")


def table_lines(cells: list[list[str]], widths: list[int]) -> str:
    """The table's lines of these cells (column by column), each column but the last
    padded to its width in ``widths``, joined by newlines (none after the last)."""
    # Plain aligned columns, each line one %-format of its cells: rich's Table takes
    # seconds at 10k rows, and a Python call per cell a tenth of one. The last column
    # needs no padding: every line loses its trailing blanks.
    line = "  ".join([f"%-{width}s" for width in widths[:len(cells) - 1]] + ["%s"])
    return "\n".join(map(str.rstrip, map(line.__mod__, zip(*cells, strict=True))))


def json_items(items: list[bytes]) -> bytes:
    """Objects' JSON (``Raw`` items of the control plane's pages) as they stand inside the
    list ``render_json_chunks`` writes, indented by two and separated by ``,\n``: any
    run of the list's objects formats the same alone, so pages format one by one."""
    if not items:
        return b""
    return msgspec.json.format(b"[" + b",".join(items) + b"]", indent=2)[2:-2]


def render_json_chunks(chunks: list[bytes]) -> None:
    """What ``render_rows`` writes for json, from ``json_items`` of its objects in order."""
    chunks = [chunk for chunk in chunks if chunk]
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:
        sys.stdout.write((b"[\n" + b",\n".join(chunks) + b"\n]\n" if chunks else b"[]\n").decode())
        return
    sys.stdout.flush()              # what went before through the text layer first
    if not chunks:
        binary.write(b"[]\n")
        return
    for number, chunk in enumerate(chunks):     # megabytes: written as they are
        binary.write(b",\n" if number else b"[\n")
        binary.write(chunk)
    binary.write(b"\n]\n")


def print_hint(action: object, node_id: str, fmt: Format) -> None:
    """Under a table: what to do about a verdict (``health.actions.hint``), with
    ``herd node reboot`` where the action is a reboot; nothing for ``none``, and nothing in
    machine formats (the reply's ``recommended_action`` says it)."""
    if fmt is not Format.table or not isinstance(action, str) or action in ("", "none"):
        return
    from herdbook.health.actions import hint
    sys.stdout.write(safe(hint(action, node_id)) + "\n")


def validation_hint(node: dict[str, Any]) -> str | None:
    """One line under `herd node describe`'s table for a VALIDATING node (which check runs
    as which allocation, since when, what brings it back) or one waiting for its
    validation to start (docs/remediation.md#validation)."""
    if node.get("validation_waiting"):
        return (f"due for validation ({node.get('validation_due')}): waits to start "
                "(validation.max_concurrent bounds the checks at once); the scheduler places "
                "nothing here until it is validated")
    if node.get("validation") != "running":
        return None
    alloc = node.get("validation_alloc") or "?"
    since = f" since {node['validation_started_at']}" if node.get("validation_started_at") else ""
    trigger = f" ({node['validation_trigger']})" if node.get("validation_trigger") else ""
    return (f"validating: {node.get('validation_check') or 'the check'}{trigger} runs as "
            f"allocation {alloc}{since}; back in service when it passes (herd alloc status "
            f"{alloc})")


def print_validation_hint(node: dict[str, Any], fmt: Format) -> None:
    """``validation_hint`` under a table; machine formats carry the fields themselves."""
    line = validation_hint(node) if fmt is Format.table else None
    if line:
        sys.stdout.write(safe(line) + "\n")


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
