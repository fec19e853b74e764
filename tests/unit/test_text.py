"""Bounded, escaped text (issue 26 item 5): what terminals and logs are shown of text an
operator or an agent wrote, and the bounds a request's strings are checked against."""

from __future__ import annotations

import io
import logging

import pytest

from herdbook.api.messages import MAX_LABELS, MAX_NAME, MAX_REASON, AddNode, NodeCommand
from herdbook.api.present import MAX_ENTRIES, MAX_TEXT, OMITTED_KEY, shown, shown_map
from herdbook.cli.client import bad_request
from herdbook.cli.output import safe
from herdbook.logs import FORMAT, MAX_MESSAGE, EscapingFormatter
from herdbook.text import clip, escape


@pytest.mark.parametrize(("raw", "escaped"), [
    ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
    ("a\nb\r\tc", "a\\nb\\r\\tc"),
    ("\x1b[31mred\x1b]0;title\x07", "\\x1b[31mred\\x1b]0;title\\x07"),
    ("\x9b2J\x7f", "\\x9b2J\\x7f"),
    ("abc\u202edcba\u2066x\u2069\u200f\u061c", "abc\\u202edcba\\u2066x\\u2069\\u200f\\u061c"),
    ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
])
def test_controls_bidi_and_separators_are_escaped_on_terminals(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped
    assert safe(raw) == escaped


def test_clip_says_how_long_the_text_was() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 3) == "abc... (6 chars)"


def _logged(*args: object, exc: bool = False) -> str:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(EscapingFormatter(FORMAT))
    logger = logging.getLogger("test-text")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        if exc:
            try:
                raise ValueError("bad\n2026-01-01 00:00:00,000 ERROR   x: forged")
            except ValueError:
                logger.exception(*args)
        else:
            logger.warning(*args)
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_a_log_record_is_one_line_whatever_its_arguments_hold() -> None:
    written = _logged("cordoned by %s: %s", "al\x1b[2Jice",
                      "fan\n2026-01-01 00:00:00,000 ERROR   x: forged \u202e")
    assert written.count("\n") == 1 and written.endswith("\n")
    assert "al\\x1b[2Jice" in written and "fan\\n2026-01-01" in written
    assert "\\u202e" in written and "\u202e" not in written


def test_a_traceback_keeps_its_lines_each_indented() -> None:
    lines = _logged("failed: %s", "x\ny", exc=True).splitlines()
    assert "failed: x\\ny" in lines[0]
    assert len(lines) > 2 and all(line.startswith("  ") for line in lines[1:])


def test_a_log_message_is_cut() -> None:
    written = _logged("%s", "z" * (MAX_MESSAGE * 2))
    assert f"... ({MAX_MESSAGE * 2} chars)" in written
    assert len(written) < MAX_MESSAGE + 200


def test_requests_are_bounded_and_the_cli_names_the_field() -> None:
    assert bad_request(NodeCommand(id="n1", reason="r" * MAX_REASON)) is None
    assert bad_request(NodeCommand(id="n1", reason="r" * (MAX_REASON + 1))) == (
        f"reason: Expected `str` of length <= {MAX_REASON}")
    assert (bad_request(NodeCommand(id="n1", actor="a" * (MAX_NAME + 1))) or "").startswith(
        "actor: ")
    many = {f"k{i}": "v" for i in range(MAX_LABELS + 1)}
    assert (bad_request(AddNode(id="n1", labels=many)) or "").startswith("labels: ")
    assert bad_request({"id": "n1", "reason": "r" * 5000}) is None   # a dict is not checked


def test_a_reply_carries_an_agents_text_bounded() -> None:
    assert shown("h") == "h" and shown(None) is None
    assert shown("h" * (MAX_TEXT + 5)) == "h" * MAX_TEXT + f"... ({MAX_TEXT + 5} chars)"
    small = {"pool": "a"}
    assert shown_map(small) == small and shown_map(small) is not small
    big = shown_map({f"k{i}": "v" * (MAX_TEXT + 1) for i in range(MAX_ENTRIES + 3)})
    assert len(big) == MAX_ENTRIES + 1 and big[OMITTED_KEY] == "3 more not shown"
    assert big["k0"].endswith(f"... ({MAX_TEXT + 1} chars)")
