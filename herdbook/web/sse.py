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

from herdbook.api.history_messages import Time
from herdbook.events.authority import Unvouched, bind_event
from herdbook.events.codec import EVENT_TYPES
from herdbook.events.subjects import EVENTS_STREAM
from herdbook.history.reader import EPOCH
from herdbook.history.times import parse_time
from herdbook.web.openapi import QUERY_DURATION

KEEP_ALIVE = 15.0
BACKLOG = 10_000
ALL = "herd.>"
ALIAS = "herd.events.>"
"""The contract's name for the whole stream (its subjects are ``herd.<aggregate>.>``)."""
FAMILIES = tuple(sorted({kind.aggregate for kind in EVENT_TYPES if kind.aggregate}))
"""Every aggregate with events in HERD_EVENTS (node, job, ..., breaker): ``herd.<it>.>``."""
SUBJECT_PATTERN = (r"^(|herd\.events\.>|herd\.>|herd\.(\*|" + "|".join(FAMILIES)
                   + r")(\.([A-Za-z0-9_-]+|\*))*(\.>)?)$")
"""What ``subject`` takes, as the OpenAPI document says: empty (all), a filter inside
HERD_EVENTS with NATS wildcards (``*`` a token, ``>`` the rest), or ``herd.events.>``."""
_SUBJECT = re.compile(SUBJECT_PATTERN)
_SEQUENCE = re.compile(r"[1-9][0-9]{0,17}")
_DURATION = re.compile(QUERY_DURATION)
_LAST_ID = re.compile(r"[0-9]{1,18}")


class BadStream(ValueError):
    """A ``subject`` or ``since`` that cannot be streamed; one line."""


def check_subject(subject: str | None) -> str:
    """A NATS subject filter inside HERD_EVENTS (``herd.events.>`` means all of it)."""
    if subject is not None and not _SUBJECT.fullmatch(subject):
        raise BadStream(f"subject {subject!r}: only HERD_EVENTS subjects stream: herd.>, or "
                        f"herd.<{'|'.join(FAMILIES)}>.<filter> (NATS wildcards * and >)")
    if not subject or subject == ALIAS:
        return ALL
    return subject


def deliver_from(since: str | None, last_event_id: str | None,
                 now: datetime) -> ConsumerConfig:
    """Where the stream starts: after ``Last-Event-ID``, else at ``since``, else new
    events only (``since`` is checked either way: a request the document refuses is
    refused whatever else it sends)."""
    word = since if since is not None else "now"
    if word == "now":
        return _resume(last_event_id) or ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    if _SEQUENCE.fullmatch(word):
        return _resume(last_event_id) or ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=int(word))
    try:
        if _DURATION.fullmatch(word):
            start = parse_time(word, now)
        else:
            start = msgspec.convert(word, Time)
    except OverflowError:   # 999999d ago is before year 1: from the start
        start = datetime.min.replace(tzinfo=UTC)
    except (ValueError, msgspec.ValidationError) as err:
        raise BadStream(f"since {word!r}: {err}; write a stream sequence, RFC 3339, a "
                        "duration ago (5m) or now") from None
    resume = _resume(last_event_id)
    if start <= EPOCH:   # nothing is stored before 1970; nats-server never answers one
        return resume or ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    return resume or ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                                    opt_start_time=start)


def _resume(last_event_id: str | None) -> ConsumerConfig | None:
    if last_event_id is None:
        return None
    if not _LAST_ID.fullmatch(last_event_id):
        raise BadStream(f"Last-Event-ID {last_event_id!r}: not a stream sequence")
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                          opt_start_seq=int(last_event_id) + 1)


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


async def stream(request: web.Request, js: JetStreamContext, closing: asyncio.Event,
                 now: datetime) -> web.StreamResponse:
    """Serve one event stream until the client goes or ``closing`` is set; a ``since``
    duration counts back from ``now`` (the server's clock)."""
    try:
        subject = check_subject(request.query.get("subject"))
        config = deliver_from(request.query.get("since"), request.headers.get("Last-Event-ID"),
                              now)
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
            {"name": "subject", "in": "query",
             "schema": {"type": "string", "default": ALL, "pattern": SUBJECT_PATTERN}},
            {"name": "since", "in": "query",
             "schema": {"anyOf": [{"type": "string", "pattern": r"^([1-9][0-9]{0,17}|now)$"},
                                  {"type": "string", "format": "date-time"},
                                  {"type": "string", "pattern": QUERY_DURATION}],
                        "default": "now"},
             "description": "a stream sequence, RFC 3339, a duration ago (5m) or now"},
            {"name": "token", "in": "query", "schema": {"type": "string"},
             "description": "the bearer token, for an EventSource (it cannot set headers)"},
            {"name": "Last-Event-ID", "in": "header",
             "schema": {"type": "string", "pattern": r"^[0-9]{1,18}$"}}],
        "responses": {"200": {"description": "text/event-stream", "content": {
            "text/event-stream": {"schema": {
                "type": "object", "description": "one message: id (the stream sequence), "
                "event (its type), data (JSON: seq, subject, event)",
                "properties": {"id": {"type": "string"}, "event": {"type": "string"},
                               "data": {"type": "string"}}}}}}}}}}
