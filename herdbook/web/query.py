"""A GET's query (and path) parameters as the JSON request of a read route: what the
document's query parameters (``openapi._query_parameters``) promise, read here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec
from multidict import MultiMapping

from herdbook.api.history_messages import Time
from herdbook.history.times import parse_time
from herdbook.web.auth import Refused
from herdbook.web.openapi import QUERY_DURATION
from herdbook.web.routes import ROUTES

_encode = msgspec.json.encode


def query_body(route: str, query: MultiMapping[str], path: Mapping[str, str] | None = None,
               renames: Mapping[str, str] | None = None, *, now: datetime) -> bytes:
    """A GET's query parameters (and path parameters) as the route's JSON request: a
    list field takes repeated or comma-separated values, ``labels`` takes ``k=v``, a time
    ``now`` or a duration ago from ``now`` (the server's clock)."""
    kind = ROUTES[route].request
    obj: dict[str, Any] = dict(path or {})
    if kind is None:
        return b""
    fields = {f.name: f.type for f in msgspec.structs.fields(kind)}
    for key in dict.fromkeys(query.keys()):
        if key == "token":
            continue
        name = (renames or {}).get(key, key)
        values = query.getall(key)
        if name in obj:
            raise Refused(400, "bad_request", f"query parameter {key!r}: the path gives it")
        if name not in fields:
            raise Refused(400, "bad_request", f"unknown query parameter {key!r}; {route} takes "
                          + ", ".join(sorted(fields)))
        text = str(fields[name])
        if name == "labels":
            pairs = [v.partition("=") for v in values]
            if any(not sep for _, sep, _ in pairs):
                raise Refused(400, "bad_request", f"{key}: write key=value")
            obj[name] = {k: v for k, _, v in pairs}
        elif text.startswith("list["):
            obj[name] = [part for v in values for part in v.split(",") if part]
        elif len(values) > 1:
            raise Refused(400, "bad_request", f"query parameter {key!r}: given {len(values)} "
                          "times; it takes one value")
        elif "datetime" in text:
            obj[name] = _time(key, values[-1], now)
        else:
            obj[name] = values[-1]
    try:
        return _encode(msgspec.convert(obj, kind, strict=False))
    except msgspec.ValidationError as err:
        raise Refused(400, "bad_request", str(err)) from None


_QUERY_DURATION = re.compile(QUERY_DURATION)


def _time(key: str, text: str, now: datetime) -> str:
    """A time in a query, as the document says (``openapi.QUERY_TIME_SCHEMA``): RFC 3339,
    ``now``, or a duration ago such as ``5m``; as RFC 3339 for the request, whose Struct
    then decodes it as any RFC 3339 time."""
    if text == "now":
        return now.isoformat()
    if _QUERY_DURATION.fullmatch(text):
        try:
            return parse_time(text, now).isoformat()
        except OverflowError:   # 999999d ago is before year 1: the start of time
            return datetime.min.replace(tzinfo=UTC).isoformat()
    try:
        return msgspec.convert(text, Time).isoformat()
    except msgspec.ValidationError:
        raise Refused(400, "bad_request", f"{key}: invalid time {text!r}: write RFC 3339 "
                      "(2026-11-21T10:00:00Z), now, or a duration ago (10m, 2h, 1d)") from None
