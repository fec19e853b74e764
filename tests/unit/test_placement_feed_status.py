"""The live feed reads a status frame's raw headers itself (``status_headers``), as
nats-py would have parsed them."""

from __future__ import annotations

from herdbook.events.feed import PENDING_MESSAGES, STATUS, status_headers


def test_a_request_timeout_with_its_pending_counts() -> None:
    raw = (b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 1000\r\n"
           b"Nats-Pending-Bytes: 0\r\n\r\n")
    assert status_headers(raw) == {STATUS: "408", "Description": "Request Timeout",
                                   PENDING_MESSAGES: "1000", "Nats-Pending-Bytes": "0"}


def test_a_bare_status_and_one_with_a_longer_description() -> None:
    assert status_headers(b"NATS/1.0 100\r\n\r\n") == {STATUS: "100"}
    assert status_headers(b"NATS/1.0 409 Consumer Deleted\r\n\r\n") == {
        STATUS: "409", "Description": "Consumer Deleted"}
    assert status_headers(b"NATS/1.0\r\nKey: a: b\r\n\r\n") == {"Key": "a: b"}
