"""What the API routes and the history routes share: the error a handler answers with,
and finding a view by id or by a unique prefix of one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from herdbook.events.subjects import validate_id


class ApiError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


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
