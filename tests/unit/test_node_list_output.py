"""`herd node list -o json` formats the control plane's pages one by one
(``output.json_items``) and prints what ``render_rows`` prints for the whole list."""

from __future__ import annotations

import io
import random
from contextlib import redirect_stdout
from typing import Any

import msgspec
import pytest

from herdbook.cli.output import Format, json_items, render_json_chunks, render_rows


def printed(render: Any, *args: Any) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        render(*args)
    return out.getvalue()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pages_formatted_one_by_one_print_the_whole_list(seed: int) -> None:
    rand = random.Random(seed)
    print(f"seed {seed}")
    rows = [{"id": f"n-{i}", "labels": {"k": "\x1b[31m\u00e9"}, "gpus": [], "nested": {"a": [1, {}]},
             "age": None if i % 2 else 1.5} for i in range(rand.randrange(0, 30))]
    items = [msgspec.json.encode(row) for row in rows]
    cuts = sorted(rand.randrange(0, len(items) + 1) for _ in range(3))
    pages = [items[a:b] for a, b in zip([0, *cuts], [*cuts, len(items)], strict=True)]
    chunks = [json_items(page) for page in pages]
    assert printed(render_json_chunks, chunks) == printed(render_rows, rows, [], Format.json)


def test_no_objects_print_an_empty_list() -> None:
    assert printed(render_json_chunks, [json_items([]), json_items([])]) == "[]\n"
