"""`herd gpu ...`: every GPU of the fleet with its health, cause and readings (``gpu.list``),
and one GPU in full (``gpu.describe``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.node_args import parse_labels, server
from herdbook.cli.output import Format, Output, print_hint, render_object, render_rows

gpu_app = typer.Typer(help="Every GPU: health with its cause, readings, faults.",
                      no_args_is_help=True)

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


def _table_row(gpu: dict[str, Any]) -> dict[str, Any]:
    used, total = gpu.get("fb_used_mib"), gpu.get("fb_total_mib")
    memory = "" if used is None else f"{used:g}/{total:g} MiB" if total else f"{used:g} MiB"
    return {**gpu, "temp": _number(gpu.get("temperature_c"), "C"),
            "power": _number(gpu.get("power_w"), "W"),
            "util": _number(gpu.get("gpu_util_pct"), "%"), "memory": memory}


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

    async def fetch(nc: Any) -> list[dict[str, Any]]:
        from msgspec.structs import replace
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            page = await client.request(nc, "gpu.list", replace(query, next_token=token),
                                        Page[dict[str, Any]])
            items.extend(page.items)
            token = page.next_token
            if not token:
                return items

    rows = client.run(server(ctx), fetch)
    if output is Format.table:
        render_rows([_table_row(row) for row in rows], COLUMNS, output)
    else:
        render_rows(rows, CSV_COLUMNS, output)


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
