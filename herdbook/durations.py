"""Durations as people write them: ``500ms``, ``2s``, ``5m``, ``1h``, ``1d``, or a number
of seconds. The config, the CLI and the simulator's scenarios read them the same way."""

from __future__ import annotations

import math
import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class Duration(float):
    """Seconds, written in the config as ``500ms``, ``2s``, ``5m``, ``1h``."""


def parse_duration(text: str | float | int) -> Duration:
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}")
    if isinstance(text, int | float):
        if not math.isfinite(text) or text < 0:
            raise ValueError(f"invalid duration {text!r}: must not be negative")
        return Duration(text)
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"invalid duration {text!r}: write e.g. 500ms, 2s, 5m, 1h")
    return Duration(float(match.group(1)) * _UNIT[match.group(2)])


def format_duration(seconds: float) -> str:
    """The shortest way ``parse_duration`` reads back: ``500ms``, ``10s``, ``2m``, ``1.5h``."""
    if seconds and seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size) * 10 == int((seconds / size) * 10):
            return f"{seconds / size:g}{unit}"
    return f"{round(seconds, 3):g}s"
