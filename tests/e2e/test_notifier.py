"""The webhook notifier against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.conftest import free_port, herd, wait_until
from tests.e2e.conftest import Fleet
from tests.servers import QuietHandler, serving_http

pytestmark = pytest.mark.e2e


class Workload:
    """A stand-in for the workload system: records calls, answers drain status."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.drained: set[str] = set()
        self.headers: list[str] = []


@pytest.fixture
def workload() -> Iterator[tuple[Workload, str]]:
    state = Workload()

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            state.calls.append({"path": self.path, **self.json_body()})
            state.headers.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            node_id = parse_qs(urlparse(self.path).query)["node_id"][0]
            body = json.dumps({"drained": node_id in state.drained, "message": "pods evicted"})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

    with serving_http(Handler) as base:
        yield state, base


def test_webhook_receives_cordon_and_drain_and_drained_waits_for_drain_status(
        fleet: Fleet, workload: tuple[Workload, str]) -> None:
    state, base = workload
    closed = f"http://127.0.0.1:{free_port()}/uncordon"
    fleet.up(f"""
lifecycle: {{heartbeat_timeout: 2s, grace_period: {{standard: 30s}}}}
approval: {{auto_approve: true}}
notifier:
  type: webhook
  retries: 1
  backoff: 100ms
  drain_status_interval: 200ms
  webhook:
    cordon_url: {base}/cordon
    uncordon_url: {closed}
    drain_url: {base}/drain
    drain_status_url: {base}/drain-status
    headers: {{Authorization: Bearer s3cret}}
    timeout: 2s
""")
    fleet.agent("k8s-node-1")
    wait_until(lambda: fleet.state("k8s-node-1") == "READY", what="READY")

    assert herd("node", "cordon", "k8s-node-1", "-m", "kernel patch",
                server=fleet.url).returncode == 0
    wait_until(lambda: any(c["event"] == "cordon" for c in state.calls), what="cordon call")
    cordon = next(c for c in state.calls if c["event"] == "cordon")
    assert cordon["path"] == "/cordon" and cordon["node_id"] == "k8s-node-1"
    assert cordon["reason"] == "kernel patch" and cordon["timestamp"].endswith("Z")
    assert state.headers[0] == "Bearer s3cret"

    assert herd("node", "drain", "k8s-node-1", server=fleet.url).returncode == 0
    wait_until(lambda: any(c["event"] == "drain" for c in state.calls), what="drain call")
    # the node runs nothing, but DRAINED waits for the workload system to say so
    wait_until(lambda: fleet.state("k8s-node-1") == "DRAINING", what="DRAINING")
    time.sleep(1.0)
    assert fleet.state("k8s-node-1") == "DRAINING"
    state.drained.add("k8s-node-1")
    wait_until(lambda: fleet.state("k8s-node-1") == "DRAINED", timeout=10, what="DRAINED")

    # a notification that keeps failing is an event, shown by describe
    assert herd("node", "undrain", "k8s-node-1", server=fleet.url).returncode == 0
    assert herd("node", "cordon", "k8s-node-1", server=fleet.url).returncode == 0
    assert herd("node", "uncordon", "k8s-node-1", server=fleet.url).returncode == 0

    def error() -> str:
        node = json.loads(herd("node", "describe", "k8s-node-1", "-o", "json",
                               server=fleet.url, check=True).stdout)
        return str(node["notification_error"])

    assert "uncordon failed after 2 attempts" in wait_until(error, what="notification error")
