"""`herd events ...`: read the event stream directly, as any external consumer can."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, console

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
    from nats.js.api import ConsumerConfig, DeliverPolicy

    from herdbook.events.subjects import EVENTS_STREAM
    nc = await client.connect(server)
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        meta = msg.metadata
        try:
            event = json.loads(msg.data)
        except ValueError:
            event = {"type": "undecodable", "raw": msg.data.decode(errors="replace")}
        if output is Format.json:
            sys.stdout.write(json.dumps({"seq": meta.sequence.stream, "subject": msg.subject,
                                         **event}) + "\n")
            sys.stdout.flush()
        else:
            extra = event.get("reason") or ""
            console.print(f"{meta.sequence.stream:>8}  {event.get('at', '')[:23]:<23}  "
                          f"{event.get('type', ''):<18} {_aggregate(msg.subject):<20} "
                          f"{event.get('actor', ''):<24} {extra}", markup=False)
        if not follow and meta.num_pending == 0:
            done.set()

    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(EVENTS_STREAM)
        except Exception as err:  # noqa: BLE001
            raise client.fail(f"cannot read {EVENTS_STREAM}: {err}", client.EXIT_UNREACHABLE) from None
        if not follow and info.state.last_seq < since:
            return
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=since)
        sub = await js.subscribe(subject, stream=EVENTS_STREAM, cb=on_msg, ordered_consumer=True,
                                 config=config)
        if not follow:
            # A filter that matches nothing after --since delivers nothing: stop on idle.
            while not done.is_set():
                try:
                    await asyncio.wait_for(done.wait(), timeout=1.0)
                except TimeoutError:
                    cinfo = await sub.consumer_info()
                    if cinfo.num_pending == 0 and cinfo.num_ack_pending == 0:
                        break
        else:
            await asyncio.Event().wait()
    except (KeyboardInterrupt, asyncio.CancelledError):
        pass
    finally:
        await nc.close()


def _aggregate(subject: str) -> str:
    parts = subject.split(".")
    return parts[2] if len(parts) > 2 else subject


@events_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of every event (and of heartbeats and resource reports)."""
    from herdbook.events.codec import json_schema
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
