"""How every reply travels: the envelope (``{"ok": true, "result": ...}`` or
``{"ok": false, "code": ..., "error": ...}`` with ``code`` one of ``ErrorCode``), the
base of every reply Struct and a page of items."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Generic, TypeVar

import msgspec


class ErrorCode(StrEnum):
    REFUSED = "refused"
    NOT_FOUND = "not_found"
    BAD_REQUEST = "bad_request"
    UNAVAILABLE = "unavailable"
    STORAGE_FULL = "storage_full"
    INTERNAL = "internal"


class _Reply(msgspec.Struct, frozen=True, kw_only=True):
    pass


T = TypeVar("T")


class Page(_Reply, Generic[T], frozen=True, kw_only=True):
    items: list[T]
    next_token: str | None = None


# the envelope ---------------------------------------------------------------------------
class Ok(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool = True
    result: Any


class Failed(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool = False
    code: ErrorCode
    error: str


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """Either envelope as a client reads it: the result left undecoded until the
    route's reply type decodes it."""

    ok: bool
    result: msgspec.Raw = msgspec.Raw(b"null")
    code: str = ""
    error: str = ""
