"""Interval and duration flags read the way the config reads durations (``500ms``, ``2s``,
``1m``, ``1h``; a plain number is seconds), through one parser: a bad value is click's
usage error, which the root group prints as one line (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer

from herdbook.durations import format_duration, parse_duration


def duration_parser(minimum: float = 0.0, *, positive: bool = False,
                    off: bool = False) -> Callable[[Any], float | None]:
    """Seconds from a duration string; below ``minimum`` (or zero when ``positive``) is
    refused. With ``off``, the word ``off`` is None (the periodic thing is not done)."""

    def parse(value: Any) -> float | None:
        if off and isinstance(value, str) and value.strip().lower() == "off":
            return None
        try:
            seconds = float(parse_duration(value))
        except ValueError as err:
            raise typer.BadParameter(str(err)) from None
        if seconds < minimum or (positive and seconds <= 0):
            least = f"at least {format_duration(minimum)}" if minimum else "more than 0s"
            raise typer.BadParameter(f"{value!r} is too short: {least}")
        return seconds

    return parse


def duration_option(*names: str, help: str, default: str | None = None,
                    minimum: float = 0.0, positive: bool = False, off: bool = False) -> Any:
    """A ``typer.Option`` whose value is seconds, written as a duration; ``default`` is how
    the help shows the default (the parameter's own default is in seconds). With ``off``,
    ``off`` is accepted and is None."""
    shown = f" (default: {default})" if default else ""
    return typer.Option(*names, parser=duration_parser(minimum, positive=positive, off=off),
                        metavar="DURATION|off" if off else "DURATION", show_default=False,
                        help=f"{help}{shown}")
