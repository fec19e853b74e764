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
    body = data or (b"{}" if empty else data)
    try:
        decoded: R = _decoder(kind).decode(body)
    except RecursionError:   # a 50k-deep [[[… in a field of any JSON (a job's spec)
        raise msgspec.DecodeError("body: JSON nested too deeply") from None
    except msgspec.ValidationError as err:
        # JSON has one number type, and JSON Schema (the OpenAPI document) counts 2.0 as
        # the integer 2; msgspec refuses a float where an int is due. Only on this error
        # path: the body again with its integral floats as ints.
        again = _integral_floats(body)
        if again is None:
            raise
        try:
            return msgspec.convert(again, kind)
        except msgspec.ValidationError:
            raise err from None
    return decoded


def _integral_floats(body: bytes) -> Any:
    """The body decoded with every float that is a whole number as an int, or None when
    it has none (or does not decode)."""
    changed = False

    def walk(value: Any) -> Any:
        nonlocal changed
        if isinstance(value, float) and value.is_integer():
            changed = True
            return int(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value
    try:
        out = walk(msgspec.json.decode(body))
    except (msgspec.DecodeError, RecursionError):
        return None
    return out if changed else None


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
