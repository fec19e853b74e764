"""`herd node list` itself, without typer: the typer command (``herdbook.cli.node``) and
the parse of ``herdbook.cli.entry`` both call ``list_nodes``, so what either prints is
the same by construction. Imports msgspec, nats and the API's messages, nothing of typer
or rich unless an error is printed."""

from __future__ import annotations

import asyncio
import keyword
from datetime import datetime
from typing import Any

import msgspec

from herdbook.cli import client
from herdbook.cli.output import Format, json_items, render_columns, render_json_chunks, render_rows
from herdbook.events.states import Approval

LIST_COLUMNS = [("ID", "id"), ("TYPE", "type"), ("APPROVAL", "approval"), ("STATE", "state")]
WIDE_COLUMNS = [("HEALTH", "health"), ("CLASS", "class"), ("LABELS", "labels"),
                ("LAST HEARTBEAT", "heartbeat_ago"), ("GPUS", "gpus"),
                ("ALLOCS", "allocations"), ("FINGERPRINT", "fingerprint_group"),
                ("CLAIMED BY", "claimed_by")]
ORDER_KEYS = ("id", "type", "approval", "state", "health", "class", "last_heartbeat", "gpus")
APPROVALS: tuple[str, ...] = tuple(Approval)
LOG_TIMEOUT = 300.0
"""Requests that read the event log: their cost grows with it."""


def parse_at(text: str, option: str = "--at") -> datetime:
    """TIME as an absolute UTC time for the API; a bad one is a usage error."""
    from datetime import UTC

    from herdbook.history.times import parse_time
    try:
        return parse_time(text, datetime.now(UTC))
    except ValueError as err:
        raise client.fail(f"{option}: {err}", client.EXIT_USAGE) from None


def split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v.strip()]


def check_filters(filter_approval: list[str] | None, filter_state: list[str] | None,
                  order_by: str) -> str | None:
    """What is wrong with these options, as the one-line error, or None."""
    from herdbook.events.states import resolve_state_filter
    try:
        resolve_state_filter(split(filter_state))
    except ValueError as err:
        return str(err)
    bad = [a for a in split(filter_approval) if a.upper() not in APPROVALS]
    if bad:
        return f"unknown approval {bad[0]!r}; choose from pending, approved, rejected"
    if order_by.lstrip("-") not in ORDER_KEYS:
        return f"cannot order by {order_by!r}; choose from {', '.join(ORDER_KEYS)}"
    return None


def list_nodes(server: str, output: Format, wide: bool, filter_approval: list[str] | None,
               filter_state: list[str] | None, labels: str | None, order_by: str,
               at: str | None) -> None:
    """Follow the API's pages and print every node."""
    problem = check_filters(filter_approval, filter_state, order_by)
    if problem is not None:
        raise client.fail(problem, client.EXIT_USAGE)
    from msgspec.structs import replace

    from herdbook.api.messages import ListNodes, Page
    selector: dict[str, str] = {}
    if labels is not None:
        from herdbook.cli.node_args import parse_labels
        selector = parse_labels(labels)
    key = order_by.lstrip("-")
    reverse = order_by.startswith("-")
    # the API's enum has each word in upper or lower case only; typed in any
    approvals = [w.strip().upper() for w in split(filter_approval)]
    states = [w.strip().upper() for w in split(filter_state)]
    query = ListNodes(filter_approval=approvals, filter_state=states, labels=selector,
                      wide=output in (Format.json, Format.yaml))
    when = None if at is None else parse_at(at)
    columns = LIST_COLUMNS + (WIDE_COLUMNS if wide else [])
    # json in id order prints the control plane's objects as they came (the bytes the
    # rows would encode to again); a table or csv reads only the fields it shows (a
    # Struct of them: msgspec skips the others); the rest reads plain rows.
    verbatim = output is Format.json and key == "id" and when is None
    shown = output in (Format.table, Format.csv) and when is None
    row: Any = row_type([k for _, k in columns] + [key]) if shown else dict[str, Any]
    reply: Any = Page[msgspec.Raw] if verbatim else Page[row]

    async def page(nc: Any, token: str | None) -> tuple[list[Any], str | None]:
        if when is None:
            now = await client.request(nc, "node.list", replace(query, next_token=token),
                                       reply)
            return now.items, now.next_token
        from herdbook.api.history_messages import NodesAt, PastNodesPage
        past = await client.request(
            nc, "node.list_at", NodesAt(
                at=when, filter_approval=approvals, filter_state=states,
                labels=query.labels, wide=query.wide, next_token=token),
            PastNodesPage, timeout=LOG_TIMEOUT)
        return past.items, past.next_token

    async def fetch(nc: Any) -> list[Any]:
        """The items, or with ``verbatim`` each page's ``json_items``: the next page is
        asked for before this one is formatted, so the control plane builds it meanwhile."""
        items: list[Any] = []
        pending = asyncio.ensure_future(page(nc, None))
        while True:
            found, token = await pending
            if token:
                pending = asyncio.ensure_future(page(nc, token))
            if verbatim:
                items.append(json_items(found[::-1] if reverse else found))
            else:
                items.extend(found)
            if not token:
                return items

    rows = client.run(server, fetch)
    if verbatim:
        render_json_chunks(rows[::-1] if reverse else rows)
        return
    if shown:
        order = _attribute(key)
        rows.sort(key=lambda r: (getattr(r, order) is None, str(getattr(r, order) or "")),
                  reverse=reverse)
        render_columns([(header, _values(rows, field)) for header, field in columns], output)
        return
    if output in (Format.table, Format.csv):
        for row in rows:
            age = row.get("heartbeat_age")
            row["heartbeat_ago"] = None if age is None else f"{age:.0f}s ago"
    rows.sort(key=lambda r: (r.get(key) is None, str(r.get(key) or "")), reverse=reverse)
    render_rows(rows, columns, output)


def _attribute(key: str) -> str:
    return f"{key}_" if keyword.iskeyword(key) else key


def row_type(keys: list[str]) -> type[msgspec.Struct]:
    """A node of a ``node.list`` page with only these fields (``heartbeat_ago``: its
    ``heartbeat_age``), each None where the page has none."""
    wire = [("heartbeat_age" if k == "heartbeat_ago" else k) for k in keys]
    names = {_attribute(k): k for k in dict.fromkeys(wire)}
    return msgspec.defstruct("Row", [(name, Any, None) for name in names], rename=names)


def _values(rows: list[Any], key: str) -> list[Any]:
    if key != "heartbeat_ago":
        return [getattr(row, _attribute(key)) for row in rows]
    return [None if row.heartbeat_age is None else f"{row.heartbeat_age:.0f}s ago"
            for row in rows]
