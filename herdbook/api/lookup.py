"""What every route module shares: the error a handler answers with, decoding a
request, and finding a view by id or by a unique prefix of one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from herdbook.events.subjects import validate_id

R = TypeVar("R")


class ApiError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_decoders: dict[type[Any], msgspec.json.Decoder[Any]] = {}


def _decoder(kind: type[Any]) -> msgspec.json.Decoder[Any]:
    found = _decoders.get(kind)
    if found is None:
        found = _decoders[kind] = msgspec.json.Decoder(kind)
    return found


def decode(data: bytes, kind: type[R], *, empty: bool = False) -> R:
    """``data`` as the route's request Struct (msgspec raises naming the field);
    ``empty``: a route whose every field has a default takes no body as ``{}``."""
    try:
        decoded: R = _decoder(kind).decode(data or (b"{}" if empty else data))
    except RecursionError:   # a 50k-deep [[[… in a field of any JSON (a job's spec)
        raise msgspec.DecodeError("body: JSON nested too deeply") from None
    return decoded


def resolve(views: Mapping[str, Any], ident: str, what: str) -> Any:
    """A view by id or by a unique prefix of one; otherwise not_found or refused."""
    if ident in views:
        return views[ident]
    validate_id(ident, f"{what} id")
    matches = sorted(key for key in views if key.startswith(ident))
    if len(matches) == 1:
        return views[matches[0]]
    if not matches:
        raise ApiError("not_found", f"{what} {ident} not found")
    shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
    raise ApiError("refused", f"prefix {ident!r} matches {len(matches)} {what}s: {shown}")
