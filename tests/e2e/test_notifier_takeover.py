"""Issue 26 item 7: a cordon folded while no replica leads reaches the webhook once the
next leader starts, exactly once. Two real `herd up` replicas on one nats-server and a
webhook receiver in the test: the leader's process group is SIGKILLed, a node is
cordoned through the surviving replica's API before it takes the lease over, and the
new leader notifies that cordon once (and nothing the old leader had notified)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import herd, wait_until
from tests.e2e.test_replicas import Replicas, leading_replica, status
from tests.servers import QuietHandler, serving_http

pytestmark = pytest.mark.e2e


class Receiver:
    """A webhook receiver: every POST's path, body and idempotency key, in order."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def of(self, event: str, reason: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["event"] == event
                    and (reason is None or c["reason"] == reason)]


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.json_body()
            with state.lock:
                state.calls.append({"path": self.path, "key": self.headers.get(
                    "Idempotency-Key"), **body})
            self.send_response(200)
            self.end_headers()

    with serving_http(Handler) as base:
        yield state, base


class NotifyingReplicas(Replicas):
    """Replicas with a webhook notifier, each in a process group of its own (what a
    service manager's SIGKILL of the unit reaches)."""

    config = ""

    def plane(self, name: str) -> subprocess.Popen[bytes]:
        (self.tmp / "herd.yaml").write_text(self.config)
        with open(self.tmp / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "herdbook.cli", "up", "--nats-url", self.url,
                 "--config", str(self.tmp / "herd.yaml"), "--data-dir", str(self.tmp / name),
                 "--node-id", name, "--http-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[NotifyingReplicas]:
    with NotifyingReplicas.running(tmp_path) as r:
        yield r


def test_a_cordon_folded_during_a_leader_change_reaches_the_webhook_once(
        replicas: NotifyingReplicas, receiver: tuple[Receiver, str]) -> None:
    calls, base = receiver
    # leader_ttl 6s: the lease outlives a SIGKILLed leader by 4-6 s, time enough to
    # cordon through the survivor before it leads (checked below, not assumed)
    replicas.config = f"""
lifecycle: {{heartbeat_timeout: 2s, grace_period: {{standard: 30s}}}}
approval: {{auto_approve: true}}
leader_ttl: 6s
notifier:
  type: webhook
  retries: 2
  backoff: 200ms
  webhook:
    cordon_url: {base}/cordon
    uncordon_url: {base}/uncordon
    timeout: 5s
"""
    planes = {name: replicas.plane(name) for name in ("cp-a", "cp-b")}
    wait_until(lambda: herd("node", "list", server=replicas.url).returncode == 0, timeout=60,
               what="the replicas to answer")
    replicas.agent("w1")
    wait_until(lambda: replicas.state("w1") == "READY", timeout=60, what="w1 READY")

    # given the leader notified a cordon and an uncordon (and committed its position)
    assert herd("node", "cordon", "w1", "-m", "before", server=replicas.url).returncode == 0
    wait_until(lambda: calls.of("cordon", "before"), timeout=30, what="the first cordon")
    assert herd("node", "uncordon", "w1", server=replicas.url).returncode == 0
    wait_until(lambda: calls.of("uncordon"), timeout=30, what="the first uncordon")

    leader = leading_replica(replicas.url)
    survivor = "cp-b" if leader == "cp-a" else "cp-a"

    # when the leader's process group is SIGKILLed and w1 is cordoned through the
    # survivor's API while it does not lead yet
    os.killpg(planes[leader].pid, signal.SIGKILL)
    planes[leader].wait()
    assert herd("node", "cordon", "w1", "-m", "during takeover",
                server=replicas.url).returncode == 0
    answer = status(replicas.url)
    assert answer["instance"] == survivor and not answer["leader"], \
        "the survivor led before the cordon: this run does not test the takeover"

    # then the survivor leads and the webhook hears of that cordon, once
    wait_until(lambda: status(replicas.url)["leader"], timeout=30, what="the new leader")
    wait_until(lambda: calls.of("cordon", "during takeover"), timeout=30,
               what="the cordon folded during the takeover")
    # and a later uncordon comes after it (one node's notifications keep their order)
    assert herd("node", "uncordon", "w1", server=replicas.url).returncode == 0
    wait_until(lambda: len(calls.of("uncordon")) == 2, timeout=30, what="the second uncordon")

    with calls.lock:
        seen = [(c["event"], c["reason"] if c["event"] == "cordon" else "")
                for c in calls.calls]
        keys = [c["key"] for c in calls.calls]
        assert all(c["key"] == c["event_id"] and c["seq"] > 0 for c in calls.calls), calls.calls
    assert seen == [("cordon", "before"), ("uncordon", ""), ("cordon", "during takeover"),
                    ("uncordon", "")], seen
    assert len(set(keys)) == 4, keys
