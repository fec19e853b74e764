"""Times on the read side: what an operator writes (``--at``, ``--since``) and how a
stored time reads in a reply. Pure, and light enough for the CLI to import."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import overload

from herdbook.durations import parse_duration


def parse_time(text: str, now: datetime) -> datetime:
    """ISO-8601 (``2026-11-21T10:00:00Z``; without an offset it is UTC) or a duration
    ago (``10m``, ``2h``, ``1d``, a bare number is seconds). Raises ValueError."""
    word = text.strip()
    try:
        return now - timedelta(seconds=float(parse_duration(word)))
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(word)
    except ValueError:
        raise ValueError(f"invalid time {text!r}: write ISO-8601 (2026-11-21T10:00:00Z) "
                         "or a duration ago (10m, 2h, 1d)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: datetime | None) -> str | None: ...


def iso(value: datetime | None) -> str | None:
    """``2026-11-21T10:00:01Z``: how every reply writes a time (``api/present.py`` too)."""
    return value.isoformat().replace("+00:00", "Z") if value else None
