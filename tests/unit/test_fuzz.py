"""Hostile input (DESIGN §9): every decoder, for any bytes and any JSON/YAML shape, either
decodes or refuses with its own error — never another exception that would crash a
process. Then the folds: any decoded event folds without raising."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from herdbook.config import ConfigError, parse_config
from herdbook.durations import parse_duration
from herdbook.events.codec import (
    decode_event,
    decode_health_report,
    decode_heartbeat,
    decode_resources,
    encode,
)
from herdbook.events.job_events import JobSpecError, parse_job_spec
from herdbook.events.subjects import InvalidIdError, validate_id
from herdbook.health.policy import Policy, PolicyError

FAST = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=25)


DECODERS = (decode_event, decode_heartbeat, decode_resources, decode_health_report)


@FAST
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_are_refused(data: bytes) -> None:
    for decode in DECODERS:
        try:
            decode(data)
        except msgspec.DecodeError:   # ValidationError is a DecodeError
            pass


@FAST
@given(JSON)
def test_any_json_decodes_or_is_refused(value: Any) -> None:
    data = json.dumps(value).encode()
    for decode in DECODERS:
        try:
            decode(data)
        except msgspec.DecodeError:
            pass


class _NoNats:
    def jetstream(self) -> None:
        return None


def _samples() -> list[dict[str, Any]]:
    from tests.unit.test_events import SAMPLES
    return [msgspec.to_builtins(sample) for sample in SAMPLES.values()]


@FAST
@given(st.sampled_from(_samples()), st.dictionaries(st.text(max_size=12), JSON, max_size=4),
       st.lists(st.text(max_size=12), max_size=3))
def test_a_mutated_event_decodes_or_is_refused_and_folds(sample: dict[str, Any],
                                                         changes: dict[str, Any],
                                                         dropped: list[str]) -> None:
    """Valid events with fields overwritten, added or dropped: refused, or decoded and
    folded (twice, in any view state) without raising."""
    from herdbook.projector.projection import ProjectorRunner

    body = {k: v for k, v in {**sample, **changes}.items() if k not in dropped or k == "type"}
    try:
        event = decode_event(json.dumps(body, default=str).encode())
    except msgspec.DecodeError:
        return
    runner = ProjectorRunner(_NoNats(), ":memory:")  # type: ignore[arg-type]
    runner.fold(1, event)
    runner.fold(2, event)
    assert decode_event(encode(event)) == event


def test_the_mutation_strategy_reaches_the_fold() -> None:
    """Guard against a strategy that only ever produces refused messages."""
    from herdbook.projector.projection import ProjectorRunner

    runner = ProjectorRunner(_NoNats(), ":memory:")  # type: ignore[arg-type]
    for i, sample in enumerate(_samples(), start=1):
        runner.fold(i, decode_event(json.dumps(sample, default=str).encode()))
    assert runner.nodes and runner.evals and runner.allocs and runner.jobs


@FAST
@given(st.text(max_size=300))
def test_any_config_text_parses_or_is_refused_with_a_config_error(text: str) -> None:
    try:
        parse_config(text)
    except ConfigError as err:
        assert "\n" not in str(err).strip()


@FAST
@given(JSON)
def test_any_config_shape_parses_or_is_refused(value: Any) -> None:
    try:
        parse_config(json.dumps({"lifecycle": value, "scheduler": value}))
    except ConfigError:
        pass


@FAST
@given(st.text(max_size=200))
def test_any_job_spec_parses_or_is_refused(text: str) -> None:
    try:
        parse_job_spec(text)
    except JobSpecError:
        pass


@FAST
@given(st.text(max_size=120))
def test_any_cel_condition_compiles_or_is_refused(condition: str) -> None:
    policy = json.dumps({"version": 1, "rules": [
        {"name": "r", "condition": condition, "result": "fatal"}]})
    try:
        compiled = Policy.parse(policy)
    except PolicyError:
        return
    # and a compiled rule never crashes classification, whatever the event
    compiled.classify_event({"kind": "xid", "code": 79})


@FAST
@given(st.text(max_size=40))
def test_ids_and_durations_are_refused_with_their_own_errors(text: str) -> None:
    try:
        validate_id(text)
    except InvalidIdError:
        pass
    try:
        parse_duration(text)
    except ValueError:
        pass
