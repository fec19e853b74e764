"""`herd gpu list` itself, without typer: the typer command (``herdbook.cli.gpu``) and
the parse of ``herdbook.cli.entry`` both call ``list_gpus``, so what either prints is the
same by construction. Imports msgspec, nats and the API's messages, nothing of typer or
rich unless an error is printed or labels are parsed (as ``herd node list``): at 80k
GPUs the listing's target is 1 s, the process's start included."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from operator import attrgetter
from typing import Any, TypeVar

import msgspec

from herdbook.api.envelope import Page
from herdbook.cli import client
from herdbook.cli.output import (
    Format,
    json_items,
    render_columns,
    render_json_chunks,
    render_rows,
    table_cells,
    table_lines,
)
from herdbook.events.health_report import GPU_HEALTHS

T = TypeVar("T")
HEALTHS = GPU_HEALTHS
COLUMNS = [("NODE", "node_id"), ("GPU", "index"), ("MODEL", "model"), ("HEALTH", "health"),
           ("TEMP", "temp"), ("POWER", "power"), ("UTIL", "util"), ("MEMORY", "memory"),
           ("NODE STATE", "node_state"), ("CAUSE", "cause")]
CSV_COLUMNS = [("NODE", "node_id"), ("GPU", "index"), ("UUID", "uuid"), ("MODEL", "model"),
               ("HEALTH", "health"), ("CAUSE", "cause"), ("SINCE", "since"),
               ("TEMPERATURE_C", "temperature_c"), ("POWER_W", "power_w"),
               ("GPU_UTIL_PCT", "gpu_util_pct"), ("FB_USED_MIB", "fb_used_mib"),
               ("FB_TOTAL_MIB", "fb_total_mib"), ("NODE_STATE", "node_state"),
               ("SAMPLED_AT", "sampled_at")]


def _memory(used: float | None, total: float | None) -> str:
    return "" if used is None else f"{used:g}/{total:g} MiB" if total else f"{used:g} MiB"


class Next(msgspec.Struct):
    next_token: str | None = None


def next_token(page: bytes) -> str | None:
    """A page's ``next_token`` without decoding its items: the control plane writes it
    last (``{"items":[...],"next_token":...}``), so it is read from the end; a page
    written otherwise is decoded for it (msgspec skipping the items)."""
    at = page.rfind(b'"next_token":')
    if at >= 0:
        try:
            return msgspec.json.decode(page[at + 13:-1], type=str | None)
        except msgspec.DecodeError:
            pass
    return msgspec.json.decode(page, type=Next).next_token


def plain_text(page: bytes) -> bool:
    """Whether no string of this JSON holds a character ``table_cells`` escapes (a C0 or
    C1 control, DEL, a line separator or a bidi control): a C0 control is written as an
    escape in JSON (``\\n``, ``\\u001b``; msgspec refuses one written raw), the others are
    DEL or not ASCII, so a page of ASCII without a backslash or DEL holds none. A pass at
    C speed over the page (~0.04 ms for 700 KB) instead of a search of every column."""
    return page.isascii() and b"\\" not in page and b"\x7f" not in page


def items_of(page: bytes) -> bytes | None:
    """A page's ``items`` array as it stands in the page (``[...]``) where the page has
    the control plane's shape (the items first, ``next_token`` last, no space), else
    None: the caller decodes it. The array itself is not checked here; what formats it
    refuses it if it is not JSON."""
    at = page.rfind(b'],"next_token":')
    if not page.startswith(b'{"items":[') or at < 9 or not page.endswith(b"}"):
        return None
    return page[9:at + 1]


class Shown(msgspec.Struct, frozen=True, gc=False):
    """A GPU of a ``gpu.list`` page, only what the table or CSV shows: msgspec skips the
    rest of the row without building it (the values as the page has them, untyped, so
    each cell is the text it was as a dict's value; JSON scalars only: no cycle, so not
    tracked by the garbage collector)."""

    node_id: Any = None
    index: Any = None
    uuid: Any = None
    model: Any = None
    health: Any = None
    cause: Any = None
    since: Any = None
    temperature_c: Any = None
    power_w: Any = None
    gpu_util_pct: Any = None
    fb_used_mib: Any = None
    fb_total_mib: Any = None
    node_state: Any = None
    sampled_at: Any = None


class TableRow(msgspec.Struct, frozen=True, gc=False):
    """A GPU of a page as the table reads it: ``Shown`` less what only the CSV shows
    (11 fields of 23 built: a fifth less of the table's decoding than ``Shown``'s 14)."""

    node_id: Any = None
    index: Any = None
    model: Any = None
    health: Any = None
    cause: Any = None
    temperature_c: Any = None
    power_w: Any = None
    gpu_util_pct: Any = None
    fb_used_mib: Any = None
    fb_total_mib: Any = None
    node_state: Any = None


class Cells(dict[Any, str]):
    """Each distinct value's cell, made once (``make``): a fleet's readings repeat (its
    temperatures, utilisations, memory totals), so most cells are one dict lookup at C
    speed (``map(cells.__getitem__, values)``). Equal numbers make the same cell in any
    of their types (``f"{45:g}"`` and ``f"{45.0:g}"`` are both ``45``)."""

    def __init__(self, make: Callable[[Any], str]) -> None:
        super().__init__()
        self.make = make

    def __missing__(self, value: Any) -> str:
        cell = self[value] = self.make(value)
        return cell


def _number(unit: str) -> Cells:
    return Cells(lambda v: "" if v is None else f"{v:g}{unit}")


def _plain(values: list[Any]) -> list[Any]:
    return ["" if v is None else v for v in values]


def _read(key: str, rows: list[Any]) -> list[Any]:
    return list(map(attrgetter(key), rows))


class GpuTable:
    """The table (``COLUMNS``), made page by page as the pages arrive: each page's cells,
    each the text a dict row's value made (``_memory``, ``f"{v:g}C"``, escaped by
    ``table_cells``), and its lines padded to the widths known so far. A page is padded
    again at the end only where a later page widened a column (a longer state or
    health): the last page's arrival mostly leaves the lines to join."""

    def __init__(self) -> None:
        self.widths = [len(header) for header, _ in COLUMNS]
        self.pages: list[tuple[list[int], list[list[str]], str]] = []
        """Each page's widths as it was padded to, its cells by column, its lines."""
        self.units = {"temp": ("temperature_c", _number("C")), "power": ("power_w", _number("W")),
                      "util": ("gpu_util_pct", _number("%"))}
        self.memory = Cells(lambda pair: _memory(*pair))

    def cells(self, key: str, rows: list[Any], plain: bool = False) -> list[str]:
        """One column's cells of these rows; ``plain``: the page they came in holds no
        escape and no character that is not ASCII or is DEL (``plain_text``), so no
        string of it needs escaping (``table_cells`` would return each as it is)."""
        if key in self.units:
            field, made = self.units[key]
            return list(map(made.__getitem__, _read(field, rows)))
        if key == "memory":
            return list(map(self.memory.__getitem__, zip(
                _read("fb_used_mib", rows), _read("fb_total_mib", rows), strict=True)))
        values = _read(key, rows)
        kinds = set(map(type, values))
        if key == "index":
            cells = list(map(str, values))
            return cells if kinds <= {int} else table_cells(cells)
        if plain and kinds <= {str, type(None)}:
            return _plain(values) if type(None) in kinds else values
        return table_cells(_plain(values))

    def add(self, rows: list[Any], plain: bool = False) -> None:
        if not rows:
            return
        cells = [self.cells(key, rows, plain) for _, key in COLUMNS]
        self.widths = [max(width, max(map(len, set(column))))
                       for width, column in zip(self.widths, cells, strict=True)]
        self.pages.append((self.widths, cells, table_lines(cells, self.widths)))

    def print(self) -> None:
        padded = self.widths[:-1]   # the last column is not padded
        header = table_lines([[header] for header, _ in COLUMNS], self.widths)
        sys.stdout.write("\n".join([header] + [
            lines if widths[:-1] == padded else table_lines(cells, self.widths)
            for widths, cells, lines in self.pages]) + "\n")


def csv_columns(rows: list[Shown]) -> list[tuple[str, list[Any]]]:
    return [(header, [getattr(r, key) for r in rows]) for header, key in CSV_COLUMNS]


class Printed:
    """What a listing prints, gathered page by page as the pages arrive (the next page
    already asked for, so this overlaps the control plane building it): with json each
    page's rows formatted as they came, with a table or csv each column's cells, with
    yaml the rows."""

    def __init__(self, output: Format) -> None:
        self.output = output
        self.chunks: list[bytes] = []
        self.rows: list[Any] = []
        self.table = GpuTable()
        self.columns: list[tuple[str, list[Any]]] = [(header, []) for header, _ in CSV_COLUMNS]

    def add_page(self, page: bytes) -> None:
        """One page of ``gpu.list`` (its result's bytes)."""
        if self.output is Format.json:
            listed = items_of(page)
            if listed is not None:      # the control plane's own shape: formatted at once
                self.chunks.append(msgspec.json.format(listed, indent=2)[2:-2])
                return
        items = msgspec.json.decode(page, type=PAGES[self.output]).items
        if self.output is Format.table:
            self.table.add(items, plain_text(page))
        else:
            self.add(items)

    def add(self, items: list[Any]) -> None:
        if self.output is Format.json:
            self.chunks.append(json_items(items))
        elif self.output is Format.yaml:
            self.rows.extend(items)
        elif self.output is Format.table:
            self.table.add(items)
        else:
            for (_, cells), (_, values) in zip(self.columns, csv_columns(items), strict=True):
                cells.extend(values)

    def print(self) -> None:
        if self.output is Format.json:
            render_json_chunks(self.chunks)
        elif self.output is Format.yaml:
            render_rows(self.rows, CSV_COLUMNS, self.output)
        elif self.output is Format.table:
            self.table.print()
        else:
            render_columns(self.columns, self.output)


PAGES: dict[Format, Any] = {Format.json: Page[msgspec.Raw], Format.yaml: Page[dict[str, Any]],
                            Format.table: Page[TableRow], Format.csv: Page[Shown]}
"""What each output decodes a page into: json the rows' JSON as it came, yaml every
field, a table or csv only the fields it shows (``TableRow``, ``Shown``)."""


async def asked(nc: Any, request: Awaitable[T]) -> asyncio.Future[T]:
    """``request`` (of one NATS request) started, returned once it is on the wire: its
    message published (nats-py counts it) and the loop turned once more, which is when
    nats-py's flusher writes what was published. A request that fails before it is
    published is returned done."""
    published = nc.stats["out_msgs"]
    future = asyncio.ensure_future(request)
    while nc.stats["out_msgs"] == published and not future.done():
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    return future


def split(values: list[str] | None) -> list[str]:
    return [v.strip().lower() for item in values or [] for v in item.split(",") if v.strip()]


def list_gpus(server: str, output: Format, labels: str | None, health: list[str] | None,
              node: str | None) -> None:
    """Follow the API's pages and print every GPU."""
    healths = split(health)
    bad = [h for h in healths if h not in HEALTHS]
    if bad:
        raise client.fail(f"unknown GPU health {bad[0]!r}; choose from {', '.join(HEALTHS)}",
                          client.EXIT_USAGE)
    if node is not None:
        client.check_id(node)
    from herdbook.api.request_messages import ListGpus
    selector: dict[str, str] = {}
    if labels is not None:
        from herdbook.cli.node_args import parse_labels
        selector = parse_labels(labels)
    query = ListGpus(labels=selector, health=healths, node_id=node or "")
    client.check_request(query)

    async def page(nc: Any, token: str | None) -> msgspec.Raw:
        return await client.request(nc, "gpu.list", replace(query, next_token=token),
                                    msgspec.Raw)

    async def fetch(nc: Any) -> Printed:
        """Every page, each added to what is printed. The next page is asked for (on the
        wire) before this one is decoded, so the control plane builds it while this
        process decodes and formats: at 80k GPUs, 60 pages, both sides about as costly."""
        printed = Printed(output)
        pending: asyncio.Future[msgspec.Raw] = asyncio.ensure_future(page(nc, None))
        while True:
            raw = bytes(await pending)
            token = next_token(raw)
            if token:
                pending = await asked(nc, page(nc, token))
            printed.add_page(raw)
            if not token:
                return printed

    from msgspec.structs import replace
    client.run(server, fetch).print()
