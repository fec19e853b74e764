"""The log of a long-running command (`herd up`, `herd agent`, `herd sim`): one line per
record, whatever the record's text holds.

A log message carries reasons, actors, labels and hostnames that operators and agents
wrote. A reason holding ``\\n2026-... ERROR ...`` would otherwise start a line that reads
as a record of its own, and ESC, OSC or U+202E would act on the terminal that tails the
log. So every record's message (its arguments filled in) is escaped
(``herdbook.text.escape``) and cut to ``MAX_MESSAGE`` characters; a traceback that
follows it keeps its lines, each indented, so that no line after a record's first can
pass for the start of another record."""

from __future__ import annotations

import logging

from herdbook.text import clip, escape

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
MAX_MESSAGE = 8192
"""The most characters of one record's message written (the rest is counted)."""


class EscapingFormatter(logging.Formatter):
    """``logging.Formatter`` writing each record on one line (see the module)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        record.message = clip(escape(record.message), MAX_MESSAGE)
        return super().formatMessage(record)

    def formatException(self, ei: logging._SysExcInfoType) -> str:  # noqa: N802
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    """Every line of a traceback escaped but for its newlines, and indented."""
    return "\n".join("  " + escape(line) for line in text.split("\n"))


def setup_logging(level: str) -> None:
    """The root logger at ``level``, one stderr handler writing ``FORMAT`` escaped."""
    handler = logging.StreamHandler()
    handler.setFormatter(EscapingFormatter(FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
