"""Turning msgspec's validation messages into what operators read."""

from __future__ import annotations


def error_path(message: str) -> str:
    """msgspec says ``reason - at `$.a.b```; operators read ``a.b: reason``."""
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        return message
    path = where.rstrip("`").removeprefix("$").lstrip(".") or "(top level)"
    return f"{path}: {reason}"
