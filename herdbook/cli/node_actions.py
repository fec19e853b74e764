"""The node commands that take many nodes (`herd node approve|reject|delete|cordon|
uncordon|drain|undrain|disable|enable`): several ids, or a selection by labels, state
and approval. Registered on the node app by ``herdbook.cli.node``."""

from __future__ import annotations

from typing import Annotated

import typer

from herdbook.cli import client
from herdbook.cli.bulk import ApprovalFilter, NodeIds, Selector, StateFilter, act, selection
from herdbook.cli.node_args import Reason, Yes


def approve(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
            selector: Selector = None, filter_state: StateFilter = None,
            filter_approval: ApprovalFilter = None) -> None:
    """Approve PENDING (or REJECTED) nodes so they can take part in the cluster.

    Example: herd node approve -l rack=r1 --filter-approval pending"""
    act(ctx, "node.approve", selection(node_ids, selector, filter_state, filter_approval),
        message)


def reject(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
           selector: Selector = None, filter_state: StateFilter = None,
           filter_approval: ApprovalFilter = None) -> None:
    """Reject nodes; they stay REJECTED even if they register again."""
    act(ctx, "node.reject", selection(node_ids, selector, filter_state, filter_approval),
        message)


def delete(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
           selector: Selector = None, filter_state: StateFilter = None,
           filter_approval: ApprovalFilter = None) -> None:
    """Remove nodes from the view; an agent that registers again is PENDING."""
    act(ctx, "node.delete", selection(node_ids, selector, filter_state, filter_approval),
        message)


def cordon(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
           selector: Selector = None, filter_state: StateFilter = None,
           filter_approval: ApprovalFilter = None) -> None:
    """Stop scheduling new work on nodes; running work continues.

    Example: herd node cordon -l rack=r3 -m 'rack PDU swap'"""
    act(ctx, "node.cordon", selection(node_ids, selector, filter_state, filter_approval),
        message)


def uncordon(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
             selector: Selector = None, filter_state: StateFilter = None,
             filter_approval: ApprovalFilter = None) -> None:
    """Schedule on nodes again; also clears UNHEALTHY or DEGRADED (a held fault) once the
    hardware was checked."""
    act(ctx, "node.uncordon", selection(node_ids, selector, filter_state, filter_approval),
        message)


def drain(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
          urgent: Annotated[bool, typer.Option("--urgent", help="Checkpoint running "
                                               "allocations (asks for confirmation).")] = False,
          deadline: Annotated[str | None, typer.Option("--deadline", help="Stop what still "
                                                       "runs after this long, e.g. 30m.")] = None,
          yes: Yes = False, selector: Selector = None, filter_state: StateFilter = None,
          filter_approval: ApprovalFilter = None) -> None:
    """Move work off nodes: DRAINING, then DRAINED when nothing runs on them."""
    from herdbook.durations import parse_duration
    deadline_s = None
    if deadline is not None:
        try:
            deadline_s = float(parse_duration(deadline))
        except ValueError as err:
            raise client.fail(f"--deadline: {err}", client.EXIT_USAGE) from None
    from herdbook.api.messages import DrainNode
    ask = ("Drain {nodes} urgently? Its allocations will be checkpointed.",
           "Drain {nodes} urgently? Their allocations will be checkpointed.") if urgent else None
    act(ctx, "node.drain", selection(node_ids, selector, filter_state, filter_approval),
        message, kind=DrainNode, ask=ask, yes=yes, urgent=urgent, deadline_s=deadline_s)


def undrain(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
            selector: Selector = None, filter_state: StateFilter = None,
            filter_approval: ApprovalFilter = None) -> None:
    """Schedule on draining or drained nodes again.

    Each must pass the health check: a recent heartbeat, a GPU count equal to its
    capabilities, a reported fingerprint."""
    act(ctx, "node.undrain", selection(node_ids, selector, filter_state, filter_approval),
        message)


def disable(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
            yes: Yes = False, selector: Selector = None, filter_state: StateFilter = None,
            filter_approval: ApprovalFilter = None) -> None:
    """Take nodes DOWN at once (asks for confirmation: allocations are requeued)."""
    act(ctx, "node.disable", selection(node_ids, selector, filter_state, filter_approval),
        message, ask=("Disable {nodes}? It goes DOWN now and its allocations are requeued.",
                      "Disable {nodes}? They go DOWN now and their allocations are "
                      "requeued."), yes=yes)


def enable(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
           force: Annotated[bool, typer.Option("--force", help="Even without a recent "
                                               "heartbeat.")] = False,
           selector: Selector = None, filter_state: StateFilter = None,
           filter_approval: ApprovalFilter = None) -> None:
    """Bring disabled nodes back (DOWN -> READY).

    Each needs a recent heartbeat unless --force."""
    from herdbook.api.messages import EnableNode
    act(ctx, "node.enable", selection(node_ids, selector, filter_state, filter_approval),
        message, kind=EnableNode, force=force)


def validate(ctx: typer.Context, node_ids: NodeIds = None, message: Reason = "",
             selector: Selector = None, filter_state: StateFilter = None,
             filter_approval: ApprovalFilter = None) -> None:
    """Run the configured validation check (config validation:) on READY nodes that run
    nothing: VALIDATING until it passes (back in service) or fails (UNHEALTHY).

    Example: herd node validate -l rack=r3 -m 'after the PDU swap'"""
    act(ctx, "node.validate", selection(node_ids, selector, filter_state, filter_approval),
        message)
