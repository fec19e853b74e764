"""`herd gpu ...`: every GPU of the fleet with its health, cause and readings (``gpu.list``),
and one GPU in full (``gpu.describe``)."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.gpu_list import HEALTHS
from herdbook.cli.node_args import server
from herdbook.cli.output import Format, Output, print_hint, render_object

gpu_app = typer.Typer(help="Every GPU: health with its cause, readings, faults.",
                      no_args_is_help=True)

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
    from herdbook.cli.gpu_list import list_gpus as run_list
    run_list(server(ctx), output, labels, health, node)


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
