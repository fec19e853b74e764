"""The HTTP API's pure parts: the route table and OpenAPI document, auth decisions, GET
query parameters as request bodies, the event stream's subject and start, tokens."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from multidict import MultiDict
from nats.js.api import DeliverPolicy

from herdbook.api.messages import ListNodes
from herdbook.events.codec import encode
from herdbook.events.node import NodeCordoned
from herdbook.events.subjects import event_subject
from herdbook.natsd.http_tokens import HttpTokens
from herdbook.web import sse
from herdbook.web.auth import (
    Principal,
    Refused,
    authenticate,
    authorize,
    check_bind,
    same_origin,
)
from herdbook.web.http_api import query_body
from herdbook.web.openapi import READS, ROUTES, document, http_path

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [
            r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_the_openapi_document_has_every_route_and_every_reference_resolves() -> None:
    doc = json.loads(json.dumps(document()))
    for route in ROUTES:
        item = doc["paths"][http_path(route)]
        assert "post" in item
        assert ("get" in item) == (route in READS)
    schemas = doc["components"]["schemas"]
    found = refs(doc)
    assert found
    for ref in found:
        assert ref.startswith("#/components/schemas/")
        assert ref.rsplit("/", 1)[-1] in schemas, ref
    body = doc["paths"]["/v1/node/drain"]["post"]["requestBody"]["content"]["application/json"]
    drain = schemas[body["schema"]["$ref"].rsplit("/", 1)[-1]]
    assert {"id", "reason", "urgent", "deadline_s"} <= set(drain["properties"])


def test_every_component_of_the_openapi_document_is_a_valid_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    doc = document()
    for schema in doc["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/ListNodes", "components": doc["components"]})
    validator.validate({"filter_state": ["READY"], "limit": 5})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"limit": 0})


def test_reads_are_routes_and_commands_are_not_reads() -> None:
    assert READS <= set(ROUTES)
    for command in ("node.cordon", "node.drain", "job.register", "view.rebuild", "pool.scale",
                    "alloc.requeue", "eval.retry", "node.wipe"):
        assert command not in READS


class Book:
    def __init__(self, tokens: dict[str, Principal]) -> None:
        self.tokens = tokens

    def lookup(self, token: str) -> Any:
        return self.tokens.get(token)


def test_without_auth_everyone_is_anonymous_with_auth_a_known_token_is_needed() -> None:
    assert authenticate(None, None).user is None
    book = Book({"good": Principal("op-alice", False), "ro": Principal("op-bob", True)})
    for header, query in ((None, None), ("Basic abc", None), ("Bearer bad", None),
                          ("Bearer ", "good")):
        with pytest.raises(Refused) as refused:
            authenticate(book, header, query)
        assert (refused.value.status, refused.value.code) == (401, "unauthenticated")
    assert authenticate(book, "Bearer good").user == "op-alice"
    assert authenticate(book, None, "good").user == "op-alice"
    reader = authenticate(book, "bearer ro")
    authorize(reader, mutating=False)
    with pytest.raises(Refused) as refused:
        authorize(reader, mutating=True)
    assert (refused.value.status, str(refused.value)) == (403, "this credential may only read")


def test_origin_and_bind_checks() -> None:
    assert same_origin(None, "127.0.0.1:8641", "http")
    assert same_origin("http://127.0.0.1:8641", "127.0.0.1:8641", "http")
    assert not same_origin("http://evil.example", "127.0.0.1:8641", "http")
    assert not same_origin("https://127.0.0.1:8641", "127.0.0.1:8641", "http")
    assert not same_origin("null", "127.0.0.1:8641", "http")
    assert check_bind("127.0.0.1", auth=False) is None
    assert check_bind("::1", auth=False) is None
    assert check_bind("0.0.0.0", auth=True) is None
    assert "not a loopback address" in str(check_bind("0.0.0.0", auth=False))


def test_query_parameters_become_the_routes_request() -> None:
    query = MultiDict([("filter_state", "READY,DEGRADED"), ("filter_state", "DOWN"),
                       ("limit", "5"), ("wide", "true"), ("label", "rack=r1"), ("token", "x")])
    body = query_body("node.list", query, renames={"label": "labels"}, now=NOW)
    assert msgspec.json.decode(body, type=ListNodes) == ListNodes(
        filter_state=["READY", "DEGRADED", "DOWN"], limit=5, wide=True, labels={"rack": "r1"})
    assert msgspec.json.decode(query_body("node.describe", MultiDict(), {"id": "n1"},
                                          now=NOW)) == \
        {"id": "n1"}
    for bad in (MultiDict([("nope", "1")]), MultiDict([("limit", "zero")]),
                MultiDict([("limit", "0")])):
        with pytest.raises(Refused) as refused:
            query_body("node.list", bad, now=NOW)
        assert refused.value.status == 400


def test_a_query_time_is_read_from_the_servers_clock_not_the_wall() -> None:
    """``now`` and a duration ago count from the clock the server was given."""
    def at(text: str) -> object:
        return msgspec.json.decode(query_body("node.list_at", MultiDict([("at", text)]),
                                              now=NOW))["at"]
    assert at("now") == "2026-01-01T12:00:00Z"
    assert at("5m") == "2026-01-01T11:55:00Z"


def test_the_event_stream_takes_herd_events_subjects_only() -> None:
    assert sse.check_subject(None) == sse.check_subject("herd.events.>") == "herd.>"
    assert sse.check_subject("herd.node.gpu-1.>") == "herd.node.gpu-1.>"
    assert sse.check_subject("herd.*.*.cordoned") == "herd.*.*.cordoned"
    for bad in ("herd.hb.gpu-1", "$JS.API.>", "herd", "herd.node.>.x", "herd.node. x",
                "foo.node.>", "herd.node..x"):
        with pytest.raises(sse.BadStream):
            sse.check_subject(bad)


def test_the_event_stream_starts_after_last_event_id_else_at_since_else_now() -> None:
    now = NOW
    assert sse.deliver_from(None, None, now).deliver_policy == DeliverPolicy.NEW
    by_seq = sse.deliver_from("42", None, now)
    assert (by_seq.deliver_policy, by_seq.opt_start_seq) == (DeliverPolicy.BY_START_SEQUENCE, 42)
    resumed = sse.deliver_from("1", "41", now)
    assert resumed.opt_start_seq == 42
    ago = sse.deliver_from("5m", None, now)
    assert ago.deliver_policy == DeliverPolicy.BY_START_TIME
    assert ago.opt_start_time == datetime(2026, 1, 1, 11, 55, tzinfo=UTC)
    for since, last in (("0", None), ("yesterday-ish", None), (None, "x1")):
        with pytest.raises(sse.BadStream):
            sse.deliver_from(since, last, now)


def test_an_sse_frame_carries_id_type_and_the_event_and_skips_what_its_subject_refutes() -> None:
    event = NodeCordoned(node_id="gpu-1", actor="op-alice", reason="swap")
    subject = event_subject("node", "gpu-1", "cordoned")
    frame = sse.frame(7, subject, encode(event))
    assert frame is not None
    lines = frame.decode().split("\n")
    assert lines[:2] == ["id: 7", "event: node.cordoned"] and frame.endswith(b"\n\n")
    data = json.loads(lines[2].removeprefix("data: "))
    assert data["seq"] == 7 and data["subject"] == subject
    assert data["event"]["node_id"] == "gpu-1"
    assert sse.frame(8, event_subject("node", "gpu-2", "cordoned"), encode(event)) is None


def test_tokens_are_stored_hashed_found_in_constant_time_and_revoked(tmp_path: Path) -> None:
    tokens = HttpTokens(tmp_path)
    token, entry = tokens.issue("alice")
    reader, _ = tokens.issue("alice", read_only=True)
    other, _ = tokens.issue("bob")
    text = (tmp_path / "http_tokens.json").read_text()
    assert token not in text and entry.sha256 in text
    assert (tmp_path / "http_tokens.json").stat().st_mode & 0o777 == 0o600
    found = HttpTokens(tmp_path).lookup(token)
    assert found is not None and (found.user, found.read_only) == ("op-alice", False)
    ro = tokens.lookup(reader)
    assert ro is not None and ro.read_only
    assert tokens.lookup(token + "x") is None
    assert tokens.revoke("op-alice") == 2
    assert tokens.lookup(token) is None and tokens.lookup(reader) is None
    assert tokens.lookup(other) is not None
