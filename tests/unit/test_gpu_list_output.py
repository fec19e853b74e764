"""`herd gpu list` prints what it printed when it decoded every row into a dict and
formatted the rows after the last page: the table, the csv and the json, byte for byte,
now that it decodes only the shown columns into a Struct and formats page by page as
the pages arrive (``cli/gpu_list.py``). Pure: pages in memory, stdout captured."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from typing import Any

import msgspec
import pytest

from herdbook.api.messages import Page
from herdbook.cli.gpu_list import (
    COLUMNS,
    CSV_COLUMNS,
    Printed,
    Shown,
    items_of,
    next_token,
    plain_text,
)
from herdbook.cli.output import Format, render_rows


def row(node: str, index: int, **fields: Any) -> dict[str, Any]:
    """A ``gpu.list`` row as the control plane writes it (every field, None included)."""
    base: dict[str, Any] = {
        "node_id": node, "index": index, "uuid": f"GPU-{node}-{index}", "serial": "SN",
        "model": "NVIDIA H100 80GB HBM3", "hostname": node, "health": "healthy",
        "cause": None, "since": None, "node_state": "READY", "node_health": "HEALTHY",
        "pool": "h100", "temperature_c": 45.0, "power_w": 85.868, "gpu_util_pct": 0.0,
        "fb_used_mib": 671.0, "fb_total_mib": 81920.0, "sampled_at": "2027-01-15T08:00:00Z",
        "recommended_action": None, "power_limit_w": 700.0, "ecc_sbe_volatile": 0,
        "ecc_dbe_volatile": 0, "remapped_rows_uncorrectable": 0}
    return {**base, **fields}


ROWS = [
    row("gpu-000001", 0),
    row("gpu-000001", 1, temperature_c=None, power_w=None, gpu_util_pct=None,
        fb_used_mib=None, fb_total_mib=None, sampled_at=None, model=None, uuid=None),
    row("gpu-000001", 2, health="critical", cause="critical-xid: XID 48 on GPU 2",
        since="2027-01-15T07:00:00Z", node_state="UNHEALTHY", temperature_c=92,
        power_w=700, gpu_util_pct=100.0, fb_used_mib=1024.5, fb_total_mib=0.0),
    row("gpu-000002", 0, fb_total_mib=None, fb_used_mib=512.0, temperature_c=1e21,
        cause="kmsg: \x1b[31mred\x1b[0m\nsecond line \u202e", health="degraded"),
    row("gpu-000002", 11, health="unknown", node_state="NEW", model="A" * 80,
        gpu_util_pct=33.333333333, power_w=0.1),
]


def _old_table_row(gpu: dict[str, Any]) -> dict[str, Any]:
    """What `herd gpu list` computed per dict row before (the contract kept)."""
    def number(value: float | None, unit: str) -> str:
        return "" if value is None else f"{value:g}{unit}"
    used, total = gpu.get("fb_used_mib"), gpu.get("fb_total_mib")
    memory = "" if used is None else f"{used:g}/{total:g} MiB" if total else f"{used:g} MiB"
    return {**gpu, "temp": number(gpu.get("temperature_c"), "C"),
            "power": number(gpu.get("power_w"), "W"),
            "util": number(gpu.get("gpu_util_pct"), "%"), "memory": memory}


def printed(output: Format, pages: list[list[dict[str, Any]]], decoded: bool = False) -> str:
    """What `herd gpu list` prints of these pages: each page's bytes as the control
    plane writes them (``add_page``), or with ``decoded`` its items decoded first."""
    kind: Any = {Format.json: Page[msgspec.Raw], Format.yaml: Page[dict[str, Any]]}.get(
        output, Page[Shown])
    out = Printed(output)
    for number, items in enumerate(pages):
        raw = msgspec.json.encode({"items": items, "next_token": (
            None if number == len(pages) - 1 else "x/1")})
        assert next_token(raw) == (None if number == len(pages) - 1 else "x/1")
        if decoded:
            out.add(msgspec.json.decode(raw, type=kind).items)
        else:
            out.add_page(raw)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        out.print()
    return buffer.getvalue()


def before(output: Format) -> str:
    """The old printing: every row a dict, formatted at once."""
    rows = msgspec.json.decode(msgspec.json.encode(ROWS))   # as the pages decoded
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        if output is Format.table:
            render_rows([_old_table_row(r) for r in rows], COLUMNS, output)
        else:
            render_rows(rows, CSV_COLUMNS, output)
    return buffer.getvalue()


@pytest.mark.parametrize("output", [Format.table, Format.csv, Format.json, Format.yaml])
@pytest.mark.parametrize("cut", [[5], [2, 3], [1, 1, 1, 1, 1], [0, 5]])
def test_every_output_prints_what_it_printed_before(output: Format, cut: list[int]) -> None:
    pages, start = [], 0
    for size in cut:
        pages.append(ROWS[start:start + size])
        start += size
    assert printed(output, pages) == before(output)
    assert printed(output, pages, decoded=True) == before(output)


def test_the_table_escapes_and_formats_as_before() -> None:
    table = printed(Format.table, [ROWS])
    assert "\\x1b[31mred" in table and "\x1b" not in table and "\\u202e" in table
    lines = table.splitlines()
    assert lines[0].split() == ["NODE", "GPU", "MODEL", "HEALTH", "TEMP", "POWER", "UTIL",
                                "MEMORY", "NODE", "STATE", "CAUSE"]
    assert "1024.5 MiB" in lines[3] and "92C" in lines[3] and "700W" in lines[3]
    assert "1e+21C" in lines[4] and "512 MiB" in lines[4]


def test_next_token_is_read_from_the_end_or_else_decoded() -> None:
    assert next_token(b'{"items":[{"a":"\\"next_token\\":1"}],"next_token":"n/3"}') == "n/3"
    assert next_token(b'{"items":[],"next_token":null}') is None
    assert next_token(b'{"next_token":"n/4","items":[{"x":1}]}') == "n/4"
    assert next_token(b'{"items":[]}') is None


def test_json_formats_the_items_as_they_stand_or_decodes_a_page_of_another_shape() -> None:
    """-o json formats a page's items array where it stands (the control plane writes
    ``{"items":[...],"next_token":...}``); a page written otherwise is decoded, and
    prints the same."""
    page = msgspec.json.encode({"items": ROWS[:2], "next_token": "x/1"})
    assert items_of(page) == msgspec.json.encode(ROWS[:2])
    reordered = msgspec.json.encode({"next_token": None, "items": ROWS})
    spaced = b'{"items": ' + msgspec.json.encode(ROWS) + b', "next_token": null}'
    assert items_of(reordered) is None and items_of(spaced) is None
    for other in (reordered, spaced):
        out = Printed(Format.json)
        out.add_page(other)
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            out.print()
        assert buffer.getvalue() == before(Format.json)


def test_a_page_is_plain_text_only_without_escapes_del_or_other_than_ascii() -> None:
    """A plain page's cells are taken as they are (no search of each column): only a page
    that cannot hold a character the table escapes is plain."""
    assert plain_text(msgspec.json.encode(ROWS[:3]))
    for bad in ("\x1b[31m", "line\nbreak", "\u202e", "\x85", "\x7f", "caf\u00e9", '"quoted"'):
        assert not plain_text(msgspec.json.encode([{"cause": bad}])), repr(bad)
