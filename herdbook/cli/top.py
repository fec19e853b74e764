"""`herd top`: a live terminal view of the fleet, refreshed in place.

Counts by state, heartbeat lag (p50/p99/max over the nodes), projector lag, the nodes
that changed state since the last refresh, and the latest node events (read live from
``herd.node.>``: appends are published on their subjects, so a plain subscription sees
them as they are stored)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.duration_flags import duration_option
from herdbook.events.states import STATE_ORDER

RECENT = 12
LOOK_BACK = 500
"""Node events read back at start, for the panels' first lines."""
NOT_STATE = frozenset({"info_updated", "notification_failed", "claimed", "released",
                       "wipe_started", "wipe_step", "conformance_changed"})
"""Node events that leave the node's one-word state as it was."""


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summarize(nodes: list[dict[str, Any]], before: dict[str, str]) -> dict[str, Any]:
    """What one frame shows, from one node list; ``before`` is the previous frame's
    states (for the nodes that changed)."""
    states = Counter(str(n["state"]) for n in nodes)
    ages = [float(n["heartbeat_age"]) for n in nodes if n.get("heartbeat_age") is not None]
    changed = [(n["id"], before[n["id"]], n["state"]) for n in nodes
               if n["id"] in before and before[n["id"]] != n["state"]]
    return {"states": states, "p50": quantile(ages, 0.5), "p99": quantile(ages, 0.99),
            "max": max(ages) if ages else None, "changed": changed,
            "now": {n["id"]: str(n["state"]) for n in nodes}}


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def event_line(event: Any) -> str:
    """One line of the recent-events panel; the type column fits the longest type."""
    from herdbook.cli.events import type_width
    reason = getattr(event, "reason", "") or ""
    return (f"{event.at:%H:%M:%S} {event.event_name:<{type_width() - len('node.')}} "
            f"{event.aggregate_id:<20} {event.actor:<18} {reason}").rstrip()


def seed(raws: list[tuple[int, str, bytes]], states: dict[str, str],
         events: deque[str], changes: deque[str]) -> None:
    """The panels' first lines from the newest stored node events (oldest first): every
    event in recent events; those that change a node's state in state changes, with the
    state the node has now."""
    from herdbook.events.authority import bind_event
    for _, subject, data in raws:
        try:
            event = bind_event(subject, data)
        except Exception:  # noqa: BLE001 - refused (dead-lettered by the control plane)
            continue
        events.appendleft(event_line(event))
        if event.event_name not in NOT_STATE:
            now = states.get(event.aggregate_id, "gone")
            changes.appendleft(f"{event.at:%H:%M:%S} {event.aggregate_id}: "
                               f"{event.event_name} (now {now})")


def frame(summary: dict[str, Any], status: dict[str, Any], events: deque[str],
          changes: deque[str], server: str, live: bool = True) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from herdbook.cli.output import safe

    states = summary["states"]
    head = Text.assemble(
        ("herd top", "bold"), f"  {server}  nodes {sum(states.values())}  ",
        f"projector lag {status.get('projector_lag', '?')} events  ",
        f"heartbeat age p50 {_seconds(summary['p50'])} p99 {_seconds(summary['p99'])} "
        f"max {_seconds(summary['max'])}  detections {status.get('liveness_detections', 0)}")
    counts = Table(title="nodes by state", box=None, pad_edge=False)
    ordered = [s for s in STATE_ORDER if states.get(s)] + sorted(
        s for s in states if s not in STATE_ORDER)
    for state in ordered:
        counts.add_column(Text(safe(state)), justify="right")
    counts.add_row(*(str(states[s]) for s in ordered))
    changed = Table(title="state changes", box=None, pad_edge=False)
    changed.add_column("")
    # Ids, actors and reasons come from events: shown as text, never read as markup.
    for line in changes:
        changed.add_row(Text(safe(line)))
    recent = Table(title="recent events", box=None, pad_edge=False)
    recent.add_column("")
    for line in events:
        recent.add_row(Text(safe(line)))
    parts: list[Any] = [head, Text(""), counts, Text(""), changed, Text(""), recent]
    if live:
        parts.append(Text("\nCtrl-C to quit", style="dim"))
    return Group(*parts)


def top(ctx: typer.Context,
        interval: Annotated[float, duration_option("--interval", help="Between refreshes.",
                                                   default="2s", minimum=0.2)] = 2.0,
        once: Annotated[bool, typer.Option("--once", help="Print one frame (every panel, "
                                           "from the stored events) and exit.")] = False,
        ) -> None:
    """A live view of the fleet: counts by state, nodes changing state, heartbeat and
    projector lag, recent events. Refreshes in place; Ctrl-C quits.

    Both event panels start from the newest stored node events (state changes: the events
    that change a node's state, with the state it has now), then grow as the view runs."""
    from rich.live import Live

    from herdbook.cli.output import console
    from herdbook.events.authority import bind_event

    server = str(ctx.obj["server"])
    events: deque[str] = deque(maxlen=RECENT)
    changes: deque[str] = deque(maxlen=RECENT)

    async def on_event(msg: Any) -> None:
        try:
            event = bind_event(msg.subject, msg.data)
        except Exception:  # noqa: BLE001 - refused (dead-lettered by the control plane)
            return
        events.appendleft(event_line(event))

    from herdbook.api.messages import ListNodes, NodeSummary, Page

    async def snapshot(nc: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        nodes: list[dict[str, Any]] = []
        token = None
        while True:
            page = await client.request(nc, "node.list", ListNodes(next_token=token),
                                        Page[NodeSummary])
            nodes += client.plain(page.items)
            token = page.next_token
            if not token:
                break
        return nodes, await client.request(nc, "status", {})

    async def main(nc: Any) -> None:
        from herdbook.cli.events import newest, stream_bounds
        before: dict[str, str] = {}
        nodes, status = await snapshot(nc)
        summary = summarize(nodes, before)
        first, last = await stream_bounds(nc)
        seed(await newest(nc, "herd.node.>", LOOK_BACK, first, last), summary["now"],
             events, changes)
        if once:
            console.print(frame(summary, status, events, changes, server, live=False))
            return
        sub = await nc.subscribe("herd.node.>", cb=on_event)
        try:
            with Live(frame(summary, status, events, changes, server), console=console.get(),
                      refresh_per_second=4, screen=False) as live:
                while True:
                    before = summary["now"]
                    await asyncio.sleep(interval)
                    nodes, status = await snapshot(nc)
                    summary = summarize(nodes, before)
                    for node_id, old, new in summary["changed"]:
                        changes.appendleft(f"{time.strftime('%H:%M:%S')} {node_id}: {old} → {new}")
                    live.update(frame(summary, status, events, changes, server))
        finally:
            await sub.unsubscribe()

    try:
        client.run(server, main)
    except KeyboardInterrupt:
        pass
