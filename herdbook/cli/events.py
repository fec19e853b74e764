"""`herd events ...`: read the event stream directly, as any external consumer can.

`herd events tail` reads like `tail`: the newest 20 events (``-n``), or everything from
``--since`` (a stream sequence, or a time: ISO-8601 or a duration ago), and with
``--follow`` keeps printing new ones. The reads here are the CLI's own (named pull
consumers, stream info, message get): what operator credentials may do."""

from __future__ import annotations

import asyncio
import csv
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from herdbook.cli import client
from herdbook.cli.output import Format, safe

events_app = typer.Typer(help="Read herdbook's event stream.", no_args_is_help=True)

TAIL_LINES = 20
ID_WIDTH = 20
CSV_COLUMNS = ("seq", "at", "type", "id", "actor", "reason", "subject")
REFUSED = "refused"
"""The type shown for a message its subject does not vouch for."""

Raw = tuple[int, str, bytes]
"""A stored message as the CLI reads it: (stream sequence, subject, bytes)."""


def parse_since(text: str, option: str = "--since") -> int | datetime:
    """A stream sequence (a bare whole number, from 1) or a time (ISO-8601, or a duration
    ago with its unit: ``10m``, ``2h``, ``1d``). Anything else is a usage error."""
    from herdbook.history.times import parse_time
    word = text.strip()
    if word.isdigit():
        if int(word) < 1:
            raise client.fail(f"{option} {word}: stream sequences start at 1", client.EXIT_USAGE)
        return int(word)
    try:
        return parse_time(word, datetime.now(UTC))
    except ValueError as err:
        raise client.fail(f"{option}: {err}; or a stream sequence (1, 2, ...)",
                          client.EXIT_USAGE) from None


def type_width() -> int:
    """Wide enough for the longest event type there is (``node.conformance_changed``)."""
    from herdbook.events.codec import EVENT_TYPES, event_tag
    return max(len(event_tag(cls)) for cls in EVENT_TYPES)


def row_of(seq: int, subject: str, data: bytes) -> dict[str, Any]:
    """A stored message as a row: the event its subject vouches for (its fields as the
    schema has them), or, for a message the subject does not vouch for (undecodable, a
    type or an id its subject does not carry: what the projector dead-letters), a row
    of type ``refused`` with the reason and none of the body's claims."""
    import msgspec

    from herdbook.events.authority import Unvouched, bind_event
    try:
        event = bind_event(subject, data)
    except Unvouched as err:
        return {"seq": seq, "subject": subject, "type": REFUSED, "refused": str(err),
                "reason": f"refused: {err}"}
    # its fields as JSON has them (lists, not tuples: yaml takes those), read back from
    # the typed event: no field this version does not know, so no depth it did not bound
    return {"seq": seq, "subject": subject, **msgspec.json.decode(msgspec.json.encode(event))}


def _aggregate(subject: str) -> str:
    parts = subject.split(".")
    return parts[2] if len(parts) > 2 else subject


class Printer:
    """One event per line (table, json, csv) or per document (yaml); the table's columns
    are fitted to the rows given first, never narrower than the longest event type."""

    def __init__(self, fmt: Format, first: list[dict[str, Any]]) -> None:
        self.fmt = fmt
        self.widths = (max([8, *(len(str(r["seq"])) for r in first)]),
                       max([type_width(), *(len(self._text(r, "type")) for r in first)]),
                       max([ID_WIDTH, *(len(safe(_aggregate(r["subject"]))) for r in first)]),
                       max([12, *(len(self._text(r, "actor")) for r in first)]))
        self._csv = csv.writer(sys.stdout) if fmt is Format.csv else None
        if self._csv is not None:
            self._csv.writerow(CSV_COLUMNS)
        self._header = fmt is Format.table   # the table's: above its first row only

    @staticmethod
    def _text(row: dict[str, Any], key: str) -> str:
        return safe(str(row.get(key) or ""))

    def _line(self, *cells: str) -> None:
        seq, at, kind, ident, actor, reason = cells
        wseq, wkind, wident, wactor = self.widths
        sys.stdout.write(f"{seq:>{wseq}}  {at[:23]:<23}  {kind:<{wkind}}  {ident:<{wident}}  "
                         f"{actor:<{wactor}}  {reason}".rstrip() + "\n")

    def print(self, row: dict[str, Any]) -> None:
        if self.fmt is Format.json:
            sys.stdout.write(json.dumps(row) + "\n")
        elif self.fmt is Format.yaml:
            import yaml
            sys.stdout.write(yaml.safe_dump(row, sort_keys=False, explicit_start=True))
        elif self._csv is not None:
            self._csv.writerow([safe(_aggregate(row["subject"])) if key == "id"
                                else self._text(row, key) for key in CSV_COLUMNS])
        else:
            if self._header:
                self._header = False
                self._line("SEQ", "TIME", "TYPE", "ID", "ACTOR", "REASON")
            self._line(str(row["seq"]), self._text(row, "at"), self._text(row, "type"),
                       safe(_aggregate(row["subject"])), self._text(row, "actor"),
                       self._text(row, "reason"))
        sys.stdout.flush()


async def stream_bounds(nc: Any) -> tuple[int, int]:
    """(first, last) sequence of HERD_EVENTS now; (1, 0) while it is empty."""
    from herdbook.events.subjects import EVENTS_STREAM
    try:
        info = await nc.jetstream().stream_info(EVENTS_STREAM)
    except Exception as err:  # noqa: BLE001
        raise client.fail(f"cannot read {EVENTS_STREAM}: {err}", client.EXIT_UNREACHABLE) from None
    return max(1, int(info.state.first_seq)), int(info.state.last_seq)


async def first_after(nc: Any, subject: str, when: datetime, first: int, last: int) -> int:
    """The sequence to read from for the events on ``subject`` stored at or after
    ``when``: a binary search over stored times (non-decreasing in stream order), each
    probe the next message on ``subject`` at or after a sequence."""
    from nats.js.errors import NotFoundError

    from herdbook.events.subjects import EVENTS_STREAM
    js = nc.jetstream()
    lo, hi = first, last + 1
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            msg = await js.get_msg(EVENTS_STREAM, seq=mid, subject=subject, next=True)
        except NotFoundError:
            hi = mid
            continue
        if msg.time is None or msg.time >= when:
            hi = mid
        else:
            lo = int(msg.seq or mid) + 1
    return lo


async def stored_at(nc: Any, seq: int) -> datetime:
    """When the first event at or after ``seq`` was stored (now, if none is yet)."""
    from nats.js.errors import NotFoundError

    from herdbook.events.subjects import EVENTS_STREAM
    try:
        msg = await nc.jetstream().get_msg(EVENTS_STREAM, seq=seq, subject="herd.>", next=True)
    except NotFoundError:
        return datetime.now(UTC)
    except Exception as err:  # noqa: BLE001
        raise client.fail(f"cannot read {EVENTS_STREAM}: {err}", client.EXIT_UNREACHABLE) from None
    return msg.time or datetime.now(UTC)


async def read(nc: Any, subject: str, start: int, end: int | None,
               on_raw: Callable[[Raw], Awaitable[None] | None]) -> None:
    """Hand over every message on ``subject`` from ``start`` to ``end`` (None: forever)."""
    from herdbook.events.feed import StreamFeed, stream_seq
    from herdbook.events.subjects import EVENTS_STREAM
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        seq = stream_seq(msg)
        if done.is_set() or (end is not None and seq > end):
            done.set()
            return
        pending = on_raw((seq, msg.subject, msg.data))
        if pending is not None:
            await pending
        if end is not None and seq >= end:
            done.set()

    if end is not None and start > end:
        return
    feed = StreamFeed(nc, EVENTS_STREAM, subject, start, on_msg, batch=500)
    try:
        await feed.start()
    except Exception as err:  # noqa: BLE001
        raise client.fail(f"cannot read {EVENTS_STREAM}: {err}", client.EXIT_UNREACHABLE) from None
    try:
        waits = [asyncio.create_task(done.wait())]
        if end is not None:
            waits.append(asyncio.create_task(feed.caught_up.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
    finally:
        await feed.stop()


async def newest(nc: Any, subject: str, count: int, first: int, last: int) -> list[Raw]:
    """The newest ``count`` messages on ``subject`` up to ``last``: windows read backwards
    from ``last``, each four times the one before, until enough matched."""
    found: list[Raw] = []
    hi, window = last, max(count, 64)
    while count and hi >= first and len(found) < count:
        lo = max(first, hi - window + 1)
        batch: list[Raw] = []
        await read(nc, subject, lo, hi, batch.append)
        found = batch + found
        hi, window = lo - 1, window * 4
    return found[-count:] if count else []


@events_app.command("tail")
def tail(
    ctx: typer.Context,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, help="Print the newest N "
                                       "events (with --since: the newest N from there).")
                     ] = TAIL_LINES,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events "
                                         "until Ctrl-C.")] = False,
    subject: Annotated[str, typer.Option("--subject", help="Subject filter, e.g. "
                                         "'herd.node.gpu-017.>' or 'herd.node.*.approved'.")] = "herd.>",
    since: Annotated[str | None, typer.Option("--since", help="From this stream sequence "
                                              "(e.g. 1200) or time (ISO-8601, or ago: 10m, "
                                              "2h, 1d) on; all of them unless -n is given.")
                     ] = None,
    output: Annotated[Format, typer.Option("--output", "-o", help="table, json (one object "
                                           "per line), yaml (one document per event) or "
                                           "csv.")] = Format.table,
) -> None:
    """Print the newest events of HERD_EVENTS, like `tail`: the last 20 by default.

    A message its subject does not vouch for (undecodable, or claiming a type or node
    its subject does not carry: dead-lettered by the control plane) is shown as type
    `refused` with the reason, never as the event it claims to be."""
    start = None if since is None else parse_since(since)
    source = ctx.get_parameter_source("lines")
    limit = None if start is not None and (source is None or source.name == "DEFAULT") \
        else lines
    try:
        asyncio.run(_tail(str(ctx.obj["server"]), subject, start, limit, follow, output))
    except KeyboardInterrupt:
        pass


async def _tail(server: str, subject: str, since: int | datetime | None, limit: int | None,
                follow: bool, output: Format) -> None:
    nc = await client.connect(server)
    reading = asyncio.ensure_future(_print(nc, subject, since, limit, follow, output))
    try:
        # NATS tells a denied publish (a JetStream API request, a pull) to the error
        # callback only: without the watch an agent's or a restricted user's tail waits
        # for a timeout, or with --follow forever.
        from herdbook.events.subjects import EVENTS_STREAM
        await client.unless_denied(nc, reading, [
            f"$JS.API.{verb}.{EVENTS_STREAM}" for verb in (
                "STREAM.INFO", "STREAM.MSG.GET", "CONSUMER.CREATE", "CONSUMER.MSG.NEXT",
                "CONSUMER.DELETE")])
    except asyncio.CancelledError:
        pass
    finally:
        if not reading.done():
            reading.cancel()
        await asyncio.gather(reading, return_exceptions=True)
        await nc.close()


async def _print(nc: Any, subject: str, since: int | datetime | None, limit: int | None,
                 follow: bool, output: Format) -> None:
    try:
        first, last = await stream_bounds(nc)
        if isinstance(since, datetime):
            since = await first_after(nc, subject, since, first, last)
        if since is None or limit is not None:
            rows = [row_of(*raw) for raw in (
                await newest(nc, subject, limit or 0, max(first, since or 1), last))]
            printer = Printer(output, rows)
            for row in rows:
                printer.print(row)
        else:
            printer = Printer(output, [])
            await read(nc, subject, max(first, since), last,
                       lambda raw: printer.print(row_of(*raw)))
        if follow:
            await read(nc, subject, last + 1, None, lambda raw: printer.print(row_of(*raw)))
    except asyncio.CancelledError:
        pass


@events_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of every event (and of heartbeats and resource reports)."""
    from herdbook.events.codec import json_schema
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")
