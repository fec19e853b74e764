"""Untrusted text made safe to show: on a terminal, in a log line, in a header. Pure.

Reasons, labels, hostnames and actors come from operators, agents and events: whatever
they hold must not move a terminal's cursor, recolour it, set its title (ESC, OSC),
reorder what it shows (bidi controls such as U+202E) or split a line (a newline, U+2028)
where a reader or a log parser would take the rest for a line of its own."""

from __future__ import annotations

import re

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     "\u2066-\u2069]")
"""C0 and C1 controls (ESC, CSI, OSC's introducer and terminator, newline), DEL, the
line and paragraph separators, and the bidi controls (marks, embeddings, overrides,
isolates)."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match[0]
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def escape(text: str) -> str:
    """``text`` with every ``CONTROL`` character written as an escape: newline ``\\n``,
    ESC ``\\x1b``, U+202E ``\\u202e``. Plain text comes back as it is."""
    return CONTROL.sub(_escaped, text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} chars)"
