"""``GET /v1/events``: HERD_EVENTS as Server-Sent Events, for consumers that cannot speak
NATS (a browser's EventSource, curl).

One ordered push consumer per stream (an ephemeral one the server forgets when the
client goes), filtered by ``subject``, from ``since`` (a stream sequence, a time: ISO-8601
or a duration ago, or ``now``, the default) or from the ``Last-Event-ID`` a reconnecting
EventSource sends (the stream sequence of the last event it saw). Each event:

    id: <stream sequence>
    event: <event type tag, e.g. node.cordoned>
    data: {"seq": N, "subject": "...", "event": {...}}

A message its subject does not vouch for (``events.authority``) is skipped, as every
reader of the stream skips it. A comment line every ``KEEP_ALIVE`` seconds keeps proxies
from closing an idle stream. A client that falls ``BACKLOG`` events behind is cut off;
its EventSource reconnects from the last id it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from datetime import UTC, datetime
from typing import Any

import msgspec
from aiohttp import web
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.history.times import parse_time

KEEP_ALIVE = 15.0
BACKLOG = 10_000
ALL = "herd.>"
ALIAS = "herd.events.>"
"""The contract's name for the whole stream (its subjects are ``herd.<aggregate>.>``)."""
FAMILIES = ("node", "instance", "job", "eval", "alloc", "pool")
_TOKEN = re.compile(r"[A-Za-z0-9_\-]+|\*|>")


class BadStream(ValueError):
    """A ``subject`` or ``since`` that cannot be streamed; one line."""


def check_subject(subject: str | None) -> str:
    """A NATS subject filter inside HERD_EVENTS (``herd.events.>`` means all of it)."""
    if not subject or subject == ALIAS:
        return ALL
    tokens = subject.split(".")
    if (len(tokens) < 2 or tokens[0] != "herd" or not all(_TOKEN.fullmatch(t) for t in tokens)
            or ">" in tokens[:-1] or tokens[1] not in (*FAMILIES, "*", ">")):
        raise BadStream(f"subject {subject!r}: only HERD_EVENTS subjects stream: herd.>, or "
                        f"herd.<{'|'.join(FAMILIES)}>.<filter> (NATS wildcards * and >)")
    return subject


def deliver_from(since: str | None, last_event_id: str | None,
                 now: datetime | None = None) -> ConsumerConfig:
    """Where the stream starts: after ``Last-Event-ID``, else at ``since``, else new
    events only."""
    if last_event_id:
        if not last_event_id.strip().isdigit():
            raise BadStream(f"Last-Event-ID {last_event_id!r}: not a stream sequence")
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=int(last_event_id) + 1)
    word = (since or "now").strip()
    if word == "now":
        return ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    if word.isdigit():
        if int(word) < 1:
            raise BadStream("since 0: stream sequences start at 1")
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=int(word))
    try:
        start = parse_time(word, now or datetime.now(UTC))
    except ValueError as err:
        raise BadStream(f"since: {err}; or a stream sequence, or now") from None
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start)


_encode = msgspec.json.encode


def frame(seq: int, subject: str, data: bytes) -> bytes | None:
    """One SSE message, or None for a message its subject does not vouch for."""
    try:
        event = bind_event(subject, data)
    except Unvouched:
        return None
    tag = type(event).__struct_config__.tag
    body = b'{"seq":%d,"subject":%s,"event":%s}' % (seq, _encode(subject), _encode(event))
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (seq, str(tag).encode(), body)


async def stream(request: web.Request, js: JetStreamContext, closing: asyncio.Event) -> \
        web.StreamResponse:
    """Serve one event stream until the client goes or ``closing`` is set."""
    try:
        subject = check_subject(request.query.get("subject"))
        config = deliver_from(request.query.get("since"), request.headers.get("Last-Event-ID"))
    except BadStream as err:
        raise web.HTTPBadRequest(text=msgspec.json.encode(
            {"code": "bad_request", "message": str(err)}).decode(),
            content_type="application/json") from None
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()

    async def on_msg(msg: Msg) -> None:
        if queue.qsize() >= BACKLOG:
            queue.put_nowait(None)           # too far behind: end; the client resumes
            return
        out = frame(msg.metadata.sequence.stream, msg.subject, msg.data)
        if out is not None:
            queue.put_nowait(out)

    sub = await js.subscribe(subject, stream=EVENTS_STREAM, cb=on_msg, ordered_consumer=True,
                             config=config)
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream", "Cache-Control": "no-cache",
        "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
        await response.write(b": herdbook events " + subject.encode() + b"\n\n")
        closed = asyncio.ensure_future(closing.wait())
        try:
            while not closing.is_set():
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, closed}, timeout=KEEP_ALIVE,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    if not closing.is_set():
                        await response.write(b": keep-alive\n\n")
                    continue
                item = getter.result()
                if item is None:
                    break
                await response.write(item)
        finally:
            closed.cancel()
    except ConnectionResetError:
        pass                                 # the client went
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return response


def sse_paths() -> dict[str, Any]:
    """``/v1/events`` in the OpenAPI document."""
    return {"/v1/events": {"get": {
        "operationId": "events", "summary": "HERD_EVENTS as Server-Sent Events",
        "tags": ["events"],
        "parameters": [
            {"name": "subject", "in": "query", "schema": {"type": "string", "default": ALL}},
            {"name": "since", "in": "query",
             "schema": {"type": "string", "default": "now"},
             "description": "a stream sequence, ISO-8601, a duration ago (5m) or now"},
            {"name": "token", "in": "query", "schema": {"type": "string"},
             "description": "the bearer token, for an EventSource (it cannot set headers)"},
            {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}}],
        "responses": {"200": {"description": "text/event-stream", "content": {
            "text/event-stream": {"schema": {"type": "string"}}}}}}}}
