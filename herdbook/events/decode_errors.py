"""Turning msgspec's validation messages into what operators read."""

from __future__ import annotations


def error_path(message: str) -> str:
    """msgspec says ``reason - at `$.a.b```; operators read ``a.b: reason``. Of a
    mapping's key it says ``reason - at `key` in `$.a```: ``a (key): reason``."""
    reason, sep, where = message.rpartition(" - at `")
    if not sep:
        return message
    key, in_mapping, where = where.rstrip("`").rpartition("` in `")
    path = where.removeprefix("$").lstrip(".") or "(top level)"
    return f"{path} ({key}): {reason}" if in_mapping else f"{path}: {reason}"
