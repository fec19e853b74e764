"""One node command over many nodes: several ids, or a selection by labels, state and
approval resolved with `node.list`. One line per node, a summary, exit 1 if any node
refused. One id alone keeps the single-node output (``Ok``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.node_args import confirm, parse_labels, send_command, server, split, warn_if_stale
from herdbook.cli.output import echo
from herdbook.events.states import Approval

NodeIds = Annotated[list[str] | None, typer.Argument(
    help="Node ids (one or more); or select nodes with -l/--selector, --filter-state, "
    "--filter-approval.", metavar="NODE_ID", show_default=False)]
Selector = Annotated[str | None, typer.Option(
    "--selector", "-l", help="Nodes with all these labels: k=v[,k=v].")]
StateFilter = Annotated[list[str] | None, typer.Option(
    "--filter-state", help="Nodes in this state as `herd node list` shows it (ready, "
    "cordoned, degraded, ...; repeat or comma-separate).")]
ApprovalFilter = Annotated[list[str] | None, typer.Option(
    "--filter-approval", help="Nodes with this approval: pending, approved or rejected.")]

IN_FLIGHT = 16
"""Commands sent at once: a large selection finishes in seconds, not one round trip per
node after another."""
SHOWN = 5
"""Ids a confirmation question names before it says how many more."""


@dataclass(frozen=True)
class Selection:
    """What a bulk command acts on: explicit ids, or a query over the nodes."""

    ids: list[str]
    labels: dict[str, str]
    states: list[str]
    approvals: list[str]

    @property
    def by_query(self) -> bool:
        return bool(self.labels or self.states or self.approvals)

    def describe(self) -> str:
        parts = [f"-l {','.join(f'{k}={v}' for k, v in self.labels.items())}"] if self.labels \
            else []
        parts += [f"--filter-state {','.join(self.states)}"] if self.states else []
        parts += [f"--filter-approval {','.join(self.approvals)}"] if self.approvals else []
        return " ".join(parts)


def selection(ids: list[str] | None, selector: str | None, states: list[str] | None,
              approvals: list[str] | None) -> Selection:
    """The selection as given, checked: ids or a query, not both nor neither (exit 2)."""
    from herdbook.events.states import resolve_state_filter
    wanted = list(dict.fromkeys(client.check_id(i) for i in ids or []))
    if selector is not None and not selector.strip():
        raise client.fail("-l/--selector is empty: write key=value[,key=value]",
                          client.EXIT_USAGE)
    chosen = Selection(wanted, parse_labels(selector), split(states), split(approvals))
    try:
        resolve_state_filter(chosen.states)
    except ValueError as err:
        raise client.fail(str(err), client.EXIT_USAGE) from None
    bad = [a for a in chosen.approvals if a.upper() not in tuple(Approval)]
    if bad:
        raise client.fail(f"unknown approval {bad[0]!r}; choose from pending, approved, "
                          "rejected", client.EXIT_USAGE)
    if wanted and chosen.by_query:
        raise client.fail("give node ids or a selection (-l/--selector, --filter-state, "
                          "--filter-approval), not both", client.EXIT_USAGE)
    if not wanted and not chosen.by_query:
        raise client.fail("give one or more node ids, or select nodes with -l/--selector, "
                          "--filter-state or --filter-approval", client.EXIT_USAGE)
    return chosen


def upper(words: list[str]) -> list[str]:
    """Words as typed, in the case the API's enum has (it takes upper or lower only)."""
    return [w.strip().upper() for w in words]


async def matching(nc: Any, chosen: Selection) -> list[str]:
    """The compute nodes the query selects, in id order, from `node.list` (its every
    page). The control plane's own requester node is never selected by a query."""
    from herdbook.api.messages import ListNodes, NodeSummary, Page
    from herdbook.events.states import NodeType
    ids: list[str] = []
    token: str | None = None
    while True:
        page = await client.request(nc, "node.list", ListNodes(
            filter_state=upper(chosen.states), filter_approval=upper(chosen.approvals),
            labels=chosen.labels, next_token=token), Page[NodeSummary])
        ids.extend(n.id for n in page.items if n.type is not NodeType.REQUESTER)
        token = page.next_token
        if not token:
            return sorted(ids)


def question_for(ids: list[str], single: str, many: str) -> str:
    """``single`` or ``many`` with ``{nodes}`` naming the nodes (the first few)."""
    if len(ids) == 1:
        return single.format(nodes=ids[0])
    named = ", ".join(ids[:SHOWN]) + (f", and {len(ids) - SHOWN} more"
                                      if len(ids) > SHOWN else "")
    return many.format(nodes=f"{len(ids)} nodes ({named})")


@dataclass(frozen=True)
class BulkOutcome:
    node_id: str
    line: str
    refused: bool


def done_line(node_id: str, result: Any) -> str:
    if result.unchanged:   # the goal already held: done, nothing appended
        return f"{node_id}: {result.unchanged.removeprefix(f'node {node_id} ')}"
    what = result.event.removeprefix("node.").replace("_", " ")
    return f"{node_id}: {what}" + (f", now {result.node.state}" if result.node else "")


async def send_all(nc: Any, route: str, ids: list[str],
                   make: Callable[[str], Any]) -> list[BulkOutcome]:
    """Send the command to every node, ``IN_FLIGHT`` at a time, printing each node's
    line in order as soon as it is known. A refusal is that node's; anything else (no
    answer, permission denied) stops the whole command with its exit code."""
    from herdbook.api.messages import CommandResult
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(node_id: str) -> BulkOutcome:
        async with gate:
            try:
                result = await client.attempt(nc, route, make(node_id), CommandResult)
            except client.RequestFailed as err:
                if not err.answered or err.code == client.EXIT_STORAGE_FULL:
                    raise
                return BulkOutcome(node_id, f"{node_id}: refused: {err.message}", True)
        warn_if_stale(result.node)
        return BulkOutcome(node_id, done_line(node_id, result), False)

    tasks = [asyncio.ensure_future(one(node_id)) for node_id in ids]
    outcomes: list[BulkOutcome] = []
    try:
        for task in tasks:
            outcome = await task
            echo(outcome.line)
            outcomes.append(outcome)
    except client.RequestFailed as err:
        raise client.fail(err.message, err.code) from None
    finally:
        for task in tasks:
            task.cancel()
    return outcomes


def act(ctx: typer.Context, route: str, chosen: Selection, reason: str, *,
        kind: Any = None, ask: tuple[str, str] | None = None, yes: bool = False,
        **extra: Any) -> None:
    """Run one node command over the selection. ``ask``: the confirmation question for
    one node and for many (``{nodes}`` names them), asked once; ``kind``: the request
    Struct (``NodeCommand`` unless the route takes ``extra``)."""
    if len(chosen.ids) == 1 and not chosen.by_query:
        if ask is not None:
            confirm(question_for(chosen.ids, *ask), yes)
        send_command(ctx, route, chosen.ids[0], reason, kind, **extra)
        return
    ids = chosen.ids or client.run(server(ctx), lambda nc: matching(nc, chosen))
    if not ids:
        raise client.fail(f"no node matches {chosen.describe()}", client.EXIT_USAGE)
    if ask is not None:
        confirm(question_for(ids, *ask), yes)
    from herdbook.api.messages import NodeCommand
    who = client.actor()

    def make(node_id: str) -> Any:
        return (kind or NodeCommand)(id=node_id, reason=reason, actor=who, **extra)

    client.check_request(make(ids[0]))    # a reason too long: exit 2 before any is sent
    outcomes = client.run(server(ctx), lambda nc: send_all(nc, route, ids, make))
    refused = sum(o.refused for o in outcomes)
    verb = route.removeprefix("node.")
    echo(f"{verb}: {len(outcomes) - refused} of {len(outcomes)} nodes done"
         + (f", {refused} refused" if refused else ""))
    if refused:
        raise typer.Exit(code=client.EXIT_REFUSED)
