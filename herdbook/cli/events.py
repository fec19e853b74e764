"""`herd events ...`: read the event stream directly, as any external consumer can."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, safe

events_app = typer.Typer(help="Read herdbook's event stream.", no_args_is_help=True)


@events_app.command("tail")
def tail(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    subject: Annotated[str, typer.Option("--subject", help="Subject filter, e.g. "
                                         "'herd.node.gpu-017.>' or 'herd.node.*.approved'.")] = "herd.>",
    since: Annotated[int, typer.Option("--since", min=1, help="First stream sequence.")] = 1,
    output: Annotated[Format, typer.Option("--output", "-o", help="table or json "
                                           "(one object per line).")] = Format.table,
) -> None:
    """Print the events of HERD_EVENTS from --since (default: the first) on."""
    server = str(ctx.obj["server"])
    asyncio.run(_tail(server, follow, subject, since, output))


async def _tail(server: str, follow: bool, subject: str, since: int, output: Format) -> None:
    from herdbook.events.feed import StreamFeed
    from herdbook.events.subjects import EVENTS_STREAM
    nc = await client.connect(server)

    async def on_msg(msg: Any) -> None:
        seq = msg.metadata.sequence.stream
        try:
            event = json.loads(msg.data)
        except ValueError:
            event = {"type": "undecodable", "raw": msg.data.decode(errors="replace")}
        if output is Format.json:
            sys.stdout.write(json.dumps({"seq": seq, "subject": msg.subject, **event}) + "\n")
        else:
            at, kind, actor = (safe(str(event.get(k) or "")) for k in ("at", "type", "actor"))
            sys.stdout.write(f"{seq:>8}  {at[:23]:<23}  {kind:<18} "
                             f"{safe(_aggregate(msg.subject)):<20} {actor:<24} "
                             f"{safe(str(event.get('reason') or ''))}".rstrip() + "\n")
        sys.stdout.flush()

    feed = StreamFeed(nc, EVENTS_STREAM, subject, since, on_msg, batch=500)
    try:
        try:
            await feed.start()
        except Exception as err:  # noqa: BLE001
            raise client.fail(f"cannot read {EVENTS_STREAM}: {err}", client.EXIT_UNREACHABLE) from None
        if follow:
            await asyncio.Event().wait()
        else:
            await feed.caught_up.wait()
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        await feed.stop()
        await nc.close()


def _aggregate(subject: str) -> str:
    parts = subject.split(".")
    return parts[2] if len(parts) > 2 else subject


@events_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of every event (and of heartbeats and resource reports)."""
    from herdbook.events.codec import json_schema
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
