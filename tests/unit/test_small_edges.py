"""Small edges of hostile input (issue 26, item 9): a job spec nested too deeply is
refused before the YAML parser recurses (a 50k-deep one crashed the process); aiohttp's
malformed-request errors are one line now and then (``ClientErrorLog``)."""

from __future__ import annotations

import logging

import pytest
from aiohttp.http_exceptions import BadStatusLine, LineTooLong

from herdbook.events.job_events import MAX_NESTING, JobSpecError, flow_nesting, parse_job_spec
from herdbook.web.client_errors import ClientErrorLog
from tests.fakes import FakeClock


def test_flow_nesting_counts_brackets_outside_quotes_and_comments() -> None:
    assert flow_nesting("[" * 40 + "]" * 40) == 40
    assert flow_nesting('command: ["' + "[" * 40 + '"]') == 1
    assert flow_nesting("command: ['" + "{" * 40 + "']  # " + "[" * 40) == 1
    assert flow_nesting('c: ["a\\"' + "[" * 40 + '"]') == 1   # an escaped quote stays inside


def test_a_job_spec_nested_too_deeply_is_refused_with_one_line() -> None:
    deep = '{"id": "x", "command": ' + "[" * 50_000 + "]" * 50_000 + "}"
    with pytest.raises(JobSpecError, match=r"^job: nested 50001 levels deep; a job spec "
                                           rf"nests at most {MAX_NESTING}$"):
        parse_job_spec(deep)
    spec = parse_job_spec('{"id": "x", "command": ["echo", "' + "[" * 100 + '"]}')
    assert spec.command == ["echo", "[" * 100]


def test_malformed_requests_are_one_warning_a_minute_with_the_count(caplog) -> None:  # type: ignore[no-untyped-def]
    clock = FakeClock()
    errors = ClientErrorLog(clock)
    caplog.set_level(logging.DEBUG)
    for _ in range(5):
        errors.exception("Error handling request from %s", "10.0.0.9",
                         exc_info=LineTooLong(b"x" * 9000, "8190"))
        clock.advance(10)
    errors.exception("Error handling request from %s", "10.0.0.9",
                     exc_info=BadStatusLine(b"\x16\x03\x01"))
    clock.advance(60)
    errors.exception("Error handling request from %s", "10.0.0.8",
                     exc_info=LineTooLong(b"x", "8190"))
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.getMessage().split(";")[0] for r in said] == [
        "HTTP: a malformed request from 10.0.0.9 answered 400 (LineTooLong)",
        "HTTP: a malformed request from 10.0.0.8 answered 400 (LineTooLong)"]
    assert "5 more since the last line" in said[1].getMessage()
    assert not any(r.exc_info for r in said) and "xxx" not in caplog.text


def test_other_errors_keep_aiohttps_traceback(caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.ERROR)
    try:
        raise RuntimeError("a handler bug")
    except RuntimeError as err:
        ClientErrorLog(FakeClock()).exception("Unhandled exception", exc_info=err)
    (record,) = caplog.records
    assert record.name == "aiohttp.server" and record.exc_info


def test_demo_nodes_beyond_the_demo_count_are_named() -> None:
    from pathlib import Path

    from herdbook.control.demo import stale_demo_nodes, stale_warning
    known = [f"demo-{i:03d}" for i in range(20)] + ["gpu-1", "demo-x"]
    stale = stale_demo_nodes(known, 5)
    assert stale == [f"demo-{i:03d}" for i in range(5, 20)]
    assert stale_demo_nodes(known, 20) == []
    said = stale_warning(stale, 5, Path(".herd"))
    assert said.startswith("--demo 5: 15 demo node(s) of an earlier run in this data dir "
                           "(demo-005 … demo-019) are not simulated now and will go DEGRADED")
    assert "fresh --data-dir" in said and "\n" not in said


def test_an_agent_user_of_another_node_is_named_with_the_way_out() -> None:
    from herdbook.agent.connection import creds_of_another_node
    assert creds_of_another_node("agent-gpu-2", "gpu-2") is None
    assert creds_of_another_node("op-alice", "gpu-2") is None    # operators: not judged
    assert creds_of_another_node(None, "gpu-2") is None
    said = creds_of_another_node("agent-gpu-1", "gpu-2")
    assert said == ("these credentials (user agent-gpu-1) are node gpu-1's, not node gpu-2's: "
                    "issue this node its own where herd up runs (herd creds agent gpu-2), "
                    "or start the agent with --node-id gpu-1")
