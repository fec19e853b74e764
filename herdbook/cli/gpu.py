"""`herd gpu ...`: every GPU of the fleet with its health, cause and readings (``gpu.list``),
and one GPU in full (``gpu.describe``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Annotated, Any, TypeVar

import msgspec
import typer

from herdbook.cli import client
from herdbook.cli.node_args import parse_labels, server
from herdbook.cli.output import (
    Format,
    Output,
    json_items,
    print_hint,
    render_columns,
    render_json_chunks,
    render_object,
    render_rows,
)

gpu_app = typer.Typer(help="Every GPU: health with its cause, readings, faults.",
                      no_args_is_help=True)

T = TypeVar("T")
HEALTHS = ("healthy", "degraded", "unhealthy", "critical", "fatal", "unknown")
COLUMNS = [("NODE", "node_id"), ("GPU", "index"), ("MODEL", "model"), ("HEALTH", "health"),
           ("TEMP", "temp"), ("POWER", "power"), ("UTIL", "util"), ("MEMORY", "memory"),
           ("NODE STATE", "node_state"), ("CAUSE", "cause")]
CSV_COLUMNS = [("NODE", "node_id"), ("GPU", "index"), ("UUID", "uuid"), ("MODEL", "model"),
               ("HEALTH", "health"), ("CAUSE", "cause"), ("SINCE", "since"),
               ("TEMPERATURE_C", "temperature_c"), ("POWER_W", "power_w"),
               ("GPU_UTIL_PCT", "gpu_util_pct"), ("FB_USED_MIB", "fb_used_mib"),
               ("FB_TOTAL_MIB", "fb_total_mib"), ("NODE_STATE", "node_state"),
               ("SAMPLED_AT", "sampled_at")]


def _number(value: float | None, unit: str) -> str:
    return "" if value is None else f"{value:g}{unit}"


def _memory(used: float | None, total: float | None) -> str:
    return "" if used is None else f"{used:g}/{total:g} MiB" if total else f"{used:g} MiB"


class Next(msgspec.Struct):
    next_token: str | None = None


class Shown(msgspec.Struct, frozen=True):
    """A GPU of a ``gpu.list`` page, only what the table or CSV shows: msgspec skips the
    rest of the row without building it (the values as the page has them, untyped, so
    each cell is the text it was as a dict's value)."""

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


def table_columns(rows: list[Shown]) -> list[tuple[str, list[Any]]]:
    """The table's columns (``COLUMNS``), each as (header, its values)."""
    derived: dict[str, list[Any]] = {
        "temp": [_number(r.temperature_c, "C") for r in rows],
        "power": [_number(r.power_w, "W") for r in rows],
        "util": [_number(r.gpu_util_pct, "%") for r in rows],
        "memory": [_memory(r.fb_used_mib, r.fb_total_mib) for r in rows]}
    # Every column plain strings ("" for None), so each is taken in one pass at C speed
    # (``output._cells``); the cells are what a dict row's values made.
    derived["index"] = [str(r.index) for r in rows]
    return [(header, derived[key] if key in derived
             else ["" if v is None else v for v in (getattr(r, key) for r in rows)])
            for header, key in COLUMNS]


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


@gpu_app.command("list")
def list_gpus(
    ctx: typer.Context,
    labels: Annotated[str | None, typer.Option("--selector", "-l", "--labels", help=(
        "Only GPUs of nodes with these labels: k=v[,k=v]."))] = None,
    health: Annotated[list[str] | None, typer.Option("--health", help=(
        "Only GPUs of this health: " + ", ".join(HEALTHS) + " (repeat or comma-separate)."))]
    = None,
    node: Annotated[str | None, typer.Option("--node", help="Only this node's GPUs (id or "
                                             "a unique prefix).")] = None,
    output: Output = Format.table,
) -> None:
    """List every GPU with its health and cause (the classifier's verdict), its node's
    state and its latest readings; follows the API's pages, so any fleet lists in full."""
    healths = split(health)
    bad = [h for h in healths if h not in HEALTHS]
    if bad:
        raise client.fail(f"unknown GPU health {bad[0]!r}; choose from {', '.join(HEALTHS)}",
                          client.EXIT_USAGE)
    if node is not None:
        client.check_id(node)
    from herdbook.api.messages import ListGpus, Page
    query = ListGpus(labels=parse_labels(labels), health=healths, node_id=node or "")
    client.check_request(query)

    # json prints the pages' objects as they came (the bytes the rows would encode to
    # again), formatted page by page; a table or csv decodes only the fields it shows.
    items_of: Any = {Format.json: Page[msgspec.Raw], Format.yaml: Page[dict[str, Any]]}.get(
        output, Page[Shown])

    async def page(nc: Any, token: str | None) -> msgspec.Raw:
        return await client.request(nc, "gpu.list", replace(query, next_token=token),
                                    msgspec.Raw)

    async def fetch(nc: Any) -> list[Any]:
        """Every page's items (json: each page formatted). The next page is asked for
        (on the wire: flushed) before this one is decoded, so the control plane builds it
        while this process decodes: at 80k GPUs, 60 pages, both sides about as costly."""
        items: list[Any] = []
        pending: asyncio.Future[msgspec.Raw] = asyncio.ensure_future(page(nc, None))
        while True:
            raw = await pending
            token = msgspec.json.decode(raw, type=Next).next_token  # the items skipped
            if token:
                pending = await asked(nc, page(nc, token))
            found = msgspec.json.decode(raw, type=items_of).items
            if output is Format.json:
                items.append(json_items(found))
            else:
                items.extend(found)
            if not token:
                return items

    from msgspec.structs import replace
    rows = client.run(server(ctx), fetch)
    if output is Format.json:
        render_json_chunks(rows)
    elif output is Format.yaml:
        render_rows(rows, CSV_COLUMNS, output)
    elif output is Format.csv:
        render_columns([(header, [getattr(r, key) for r in rows])
                        for header, key in CSV_COLUMNS], output)
    else:
        render_columns(table_columns(rows), output)


def parse_gpu(text: str) -> tuple[str, int]:
    """``NODE/INDEX`` (a node id or unique prefix, a GPU index); a usage error otherwise."""
    node_id, sep, index = text.rpartition("/")
    if not sep or not index.isdigit() or not node_id:
        raise client.fail(f"invalid GPU {text!r}: write NODE/INDEX, e.g. gpu-017/3",
                          client.EXIT_USAGE)
    return client.check_id(node_id), int(index)


@gpu_app.command("describe")
def describe(ctx: typer.Context,
             gpu: Annotated[str, typer.Argument(metavar="NODE/INDEX", help=(
                 "The node (id or a unique prefix) and the GPU's index, e.g. gpu-017/3."))],
             output: Output = Format.table) -> None:
    """One GPU in full: identity, every reading of its latest sample, its verdict with the
    rule and fault that caused it, its recent faults (XIDs with times) and their counts,
    and its serial's history across nodes."""
    node_id, index = parse_gpu(gpu)
    from herdbook.api.messages import GpuById, GpuDetail
    request = GpuById(node_id=node_id, index=index)
    client.check_request(request)
    detail = client.plain(client.call(server(ctx), "gpu.describe", request, GpuDetail))
    render_object(detail, output)
    print_hint(detail.get("recommended_action"), str(detail.get("node_id", node_id)), output)
